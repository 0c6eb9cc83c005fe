"""The planner: topology + model + request -> Plan (strategy, GPU ids, batch split, checkpointing, reasons).

Public API (import from the modules; this package imports nothing so `generator.plan.types` stays cheap):
    generator.plan.planner.make_plan(topology, model, request, bandwidth=None, engines=None) -> Plan
    generator.plan.types.PlanRequest, Plan
    generator.plan.bandwidth_file.MeasuredBandwidth: {frozenset(gpu ids): busbw GB/s}, read by the `plan` command
    generator.plan.fabrics.FABRICS, inter_node_gbps(...)
Pure: no file is read here. The documents built from plans (recipes/, accelerate_configs/) live in docsgen/.
"""
