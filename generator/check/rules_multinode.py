"""Multi-node rules: rendezvous address and ranks. The c10d store has no authentication, so a public address lets
anyone who can reach the port join or disrupt the job."""

from __future__ import annotations

import ipaddress

from generator.check.types import CheckContext, Finding
from generator.check.view import as_int, num_machines


def rendezvous(cfg: dict, ctx: CheckContext) -> list[Finding]:
    machines = num_machines(cfg)
    if machines <= 1:
        return []
    out = []
    ip = cfg.get("main_process_ip")
    if ip in (None, ""):
        out.append(
            Finding(
                "error",
                "main_process_ip",
                f"missing with num_machines: {machines}; launch needs the address of machine 0.",
                "set main_process_ip to machine 0's private address.",
                "rendezvous",
            )
        )
    else:
        try:
            addr = ipaddress.ip_address(str(ip).strip())
        except ValueError:
            addr = None
        if addr is not None and addr.is_global:
            out.append(
                Finding(
                    "warning",
                    "main_process_ip",
                    f"{ip} is a public address: the torch.distributed "
                    "store is unauthenticated, so anyone reaching its port can join or disrupt the job.",
                    "use the machines' private network address, or firewall main_process_port to the job's machines.",
                    "rendezvous",
                )
            )
        elif addr is not None and addr.is_loopback:
            out.append(
                Finding(
                    "error",
                    "main_process_ip",
                    f"{ip} is loopback; the other machines cannot reach it.",
                    "use machine 0's network address.",
                    "rendezvous",
                )
            )
    rank = as_int(cfg.get("machine_rank", 0))
    if rank is None or not 0 <= rank < machines:
        out.append(
            Finding(
                "error",
                "machine_rank",
                f"{cfg.get('machine_rank')!r} is not in 0..{machines - 1}.",
                "set 0 on the main machine, 1.. on the others.",
                "rendezvous",
            )
        )
    return out


RULES = [rendezvous]
