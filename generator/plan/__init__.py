"""The planner: topology + model + request -> Plan (strategy, GPU ids, batch split, checkpointing, reasons).

Public API (import from the modules; this package imports nothing so `generator.plan.types` stays cheap):
    generator.plan.planner.make_plan(topology, model, request, bandwidth=None, engines=None) -> Plan
    generator.plan.types.PlanRequest, Plan
    generator.plan.bandwidth_file.load_bandwidth_file(path) -> {frozenset(gpu ids): busbw GB/s}
    generator.plan.fabrics.FABRICS, inter_node_gbps(...)
    generator.plan.reference_configs.regenerate(out_dir) -> list[Path]
"""
