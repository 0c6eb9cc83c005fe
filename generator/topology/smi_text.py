"""Parser for `nvidia-smi topo -m` text as it appears in the wild (terminal copies, pastes, old drivers).

Accepts tabs or runs of spaces, ANSI codes, prompt lines before and shell junk after, indentation, NIC columns and a
`NIC Legend:` block, `CPU Affinity` / `NUMA Affinity` / `GPU NUMA ID` columns (any subset, empty cells), legacy `SOC`,
no legend, any GPU count. Anything it cannot read raises UserError naming what and where (line numbers are 1-based).
"""

from __future__ import annotations

import re

from generator.errors import UserError
from generator.topology.build import RawMatrix

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_GPU = re.compile(r"GPU(\d{1,4})")
_CODE = re.compile(r"X|NV(\d{1,3})|PIX|PXB|PHB|NODE|SYS|SOC")
_FUSED_CODES = re.compile(r"(?:X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)+(?:\d[\d,\-]*|N/A)?")
_ONE_CODE = re.compile(r"X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC|\d[\d,\-]*|N/A")
_HEADER_SPLIT = re.compile(r"(?=GPU\d)|(?=NIC\d)|(?=CPU)|(?=NUMA)")
_CPU_LIST = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
_P2P_CODES = {"OK", "CNS", "GNS", "TNS", "NS", "U"}
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_ERROR_HINTS = (
    "nvidia-smi has failed",
    "couldn't communicate with the nvidia driver",
    "no devices were found",
    "failed to initialize nvml",
    "driver/library version mismatch",
    "command not found",
    "unable to determine the device handle",
)
_PATH_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3}
MAX_GPUS = 256
MAX_NVLINKS = 72


def _clean_lines(text: str) -> list[str]:
    if "\x00" in text:
        raise UserError("topology text is binary (contains NUL bytes); expected the output of `nvidia-smi topo -m`")
    text = _ANSI.sub("", text)
    controls = len(_CONTROL.findall(text))
    if controls and controls * 20 > len(text):
        raise UserError("topology text looks binary (mostly control characters); expected `nvidia-smi topo -m` output")
    return [_CONTROL.sub(" ", line.rstrip("\r")) for line in text.split("\n")]


def _header_tokens(line: str, warnings: list[str]) -> list[str]:
    tokens: list[str] = []
    for token in line.split():
        parts = [p for p in _HEADER_SPLIT.split(token) if p]
        if len(parts) > 1:
            warnings.append(f"header columns fused by nvidia-smi: {token!r} read as {', '.join(parts)}")
        tokens.extend(parts)
    return tokens


def _find_header(lines: list[str], warnings: list[str]) -> tuple[int, list[str]]:
    for n, line in enumerate(lines):
        tokens = _header_tokens(line, [])
        if tokens and _GPU.fullmatch(tokens[0]) and "X" not in tokens:
            return n, _header_tokens(line, warnings)
    low = "\n".join(lines).lower()
    if not low.strip():
        raise UserError("topology text is empty; expected the output of `nvidia-smi topo -m`")
    for hint in _ERROR_HINTS:
        if hint in low:
            line = next(ln.strip() for ln in lines if hint in ln.lower())
            raise UserError(f"topology text is an error message, not a topology: {line[:160]!r}")
    raise UserError("no `GPU0 GPU1 ...` header line found; expected the output of `nvidia-smi topo -m`")


def _split_header(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Device columns (GPUs, NICs) come first; the affinity columns follow, each of several words."""
    devices: list[str] = []
    for x, token in enumerate(tokens):
        if token in ("CPU", "NUMA", "GPU", "Affinity", "ID"):
            tail = " ".join(tokens[x:])
            found = sorted((tail.find(name), name) for name in _AFFINITY_COLUMNS if name in tail)
            return devices, [name for _, name in found]
        devices.append(token)
    return devices, []


def _row_cells(tokens: list[str], gpu_count: int, warnings: list[str], where: str) -> tuple[list[str], list[str]]:
    """Leading link codes of a row (fused cells split) and the affinity tokens after them."""
    cells: list[str] = []
    rest = list(tokens)
    while rest:
        token = rest[0]
        if _CODE.fullmatch(token):
            cells.append(rest.pop(0))
            continue
        if len(cells) < gpu_count and _FUSED_CODES.fullmatch(token):
            parts = re.findall(_ONE_CODE, token)
            if len(parts) > 1 and "".join(parts) == token:
                warnings.append(f"cells fused by nvidia-smi on {where}: {token!r} read as {', '.join(parts)}")
                rest[:1] = parts
                continue
        break
    return cells, rest


def _code_error(token: str, row: str, col: str, line_no: int) -> UserError:
    if token.upper() in _P2P_CODES:
        return UserError(
            f"this is a `nvidia-smi topo -p2p` matrix (cell {token!r} at row {row}, column {col}, line {line_no}): "
            "it shows peer-to-peer status, not wiring; save the output of `nvidia-smi topo -m` instead"
        )
    return UserError(
        f"unknown link code {token[:40]!r} at row {row}, column {col} (line {line_no}); "
        "expected X, NV#, PIX, PXB, PHB, NODE or SYS"
    )


def _normalize(code: str, row: str, col: str, line_no: int) -> str:
    if code == "SOC":
        return "SYS"
    if code.startswith("NV"):
        count = int(code[2:])
        if not 1 <= count <= MAX_NVLINKS:
            raise UserError(f"link code {code!r} at row {row}, column {col} (line {line_no}) is not a link count")
        return f"NV{count}"
    return code


def _first_int(token: str | None) -> int | None:
    m = re.match(r"\d{1,6}", token or "")
    return int(m.group()) if m else None


def _nic_legend(lines: list[str]) -> dict[str, str]:
    legend: dict[str, str] = {}
    for line in lines:
        m = re.fullmatch(r"\s*(NIC\d+)\s*:\s*(\S+)\s*", line)
        if m:
            legend[m.group(1)] = m.group(2)
    return legend


def parse_matrix(text: str) -> RawMatrix:
    """`nvidia-smi topo -m` text -> path codes per GPU pair plus affinity and NIC facts."""
    warnings: list[str] = []
    lines = _clean_lines(text)
    head, tokens = _find_header(lines, warnings)
    devices, affinity_cols = _split_header(tokens)
    gpu_cols = [d for d in devices if _GPU.fullmatch(d)]
    nic_cols = [d for d in devices if not _GPU.fullmatch(d)]
    if len(set(devices)) != len(devices):
        dup = next(d for d in devices if devices.count(d) > 1)
        raise UserError(f"column {dup} appears twice in the header (line {head + 1})")
    if len(gpu_cols) > MAX_GPUS:
        raise UserError(f"header names {len(gpu_cols)} GPUs (line {head + 1}); at most {MAX_GPUS} are supported")
    if devices[: len(gpu_cols)] != gpu_cols:
        warnings.append("NIC columns appear between GPU columns; they were ignored")
    ids = [int(_GPU.fullmatch(g).group(1)) for g in gpu_cols]
    if len(set(ids)) != len(ids):
        raise UserError(f"GPU numbers repeat in the header (line {head + 1}): {' '.join(gpu_cols)}")
    col_at = {g: devices.index(g) for g in gpu_cols}
    rows: dict[str, tuple[int, list[str], list[str]]] = {}
    for n in range(head + 1, len(lines)):
        parts = lines[n].split()
        if not parts:
            if rows:
                break
            continue
        name = parts[0]
        if name not in devices:
            if _GPU.fullmatch(name):
                raise UserError(f"row {name} (line {n + 1}) has no column in the header; the matrix is not square")
            break
        if name in rows:
            raise UserError(f"row {name} appears twice (lines {rows[name][0] + 1} and {n + 1})")
        cells, rest = _row_cells(parts[1:], len(devices), warnings, f"line {n + 1}")
        rows[name] = (n, cells, rest)
    missing = [g for g in gpu_cols if g not in rows]
    if missing:
        raise UserError(
            f"matrix is not square: the header (line {head + 1}) has {len(gpu_cols)} GPU columns but no row for "
            f"{', '.join(missing)}"
        )
    codes: dict[tuple[str, str], str] = {}
    numa: dict[int, int | None] = {}
    cpus: dict[int, str | None] = {}
    misaligned = False
    for g, gid in zip(gpu_cols, ids, strict=False):
        n, cells, rest = rows[g]
        for col in gpu_cols:
            at = col_at[col]
            if at >= len(cells):
                token = rest[at - len(cells)] if at - len(cells) < len(rest) else None
                if token is None:
                    raise UserError(
                        f"row {g} (line {n + 1}) has {len(cells)} link cells; expected one per column ({len(devices)})"
                    )
                raise _code_error(token, g, col, n + 1)
            code = _normalize(cells[at], g, col, n + 1)
            if (code == "X") != (col == g):
                what = "must be X (self)" if col == g else "is X, which means self"
                raise UserError(f"cell at row {g}, column {col} (line {n + 1}) {what}; got {cells[at]!r}")
            codes[(g, col)] = code
        misaligned |= len(cells) != len(devices)
        values = dict(zip(affinity_cols, rest, strict=False))
        cpu = values.get("CPU Affinity")
        cpus[gid] = cpu if cpu and _CPU_LIST.fullmatch(cpu) else None
        numa[gid] = _first_int(values.get("NUMA Affinity"))
    if misaligned:
        warnings.append("rows and header disagree on the number of NIC columns (fused columns?); kept the GPU matrix")
    pairs: dict[tuple[int, int], str] = {}
    for a, ga in zip(gpu_cols, ids, strict=False):
        for b, gb in zip(gpu_cols, ids, strict=False):
            if ga < gb:
                if codes[(a, b)] != codes[(b, a)]:
                    raise UserError(
                        f"matrix is not symmetric: {a}->{b} is {codes[(a, b)]} (line {rows[a][0] + 1}) but "
                        f"{b}->{a} is {codes[(b, a)]} (line {rows[b][0] + 1})"
                    )
                pairs[(ga, gb)] = codes[(a, b)]
    nics, nic_numa = _nics(nic_cols, gpu_cols, ids, rows, numa, lines)
    return RawMatrix(tuple(ids), pairs, numa, cpus, nics, nic_numa, tuple(dict.fromkeys(warnings)))


def _nics(nic_cols, gpu_cols, ids, rows, numa, lines) -> tuple[tuple[str, ...], dict[str, int]]:
    legend = _nic_legend(lines)
    names = tuple(legend.get(c, c) for c in nic_cols)
    nic_numa: dict[str, int] = {}
    for col, name in zip(nic_cols, names, strict=False):
        if col not in rows:
            continue
        cells = rows[col][1]
        paths = [(_PATH_RANK[c], gid) for c, gid in zip(cells, ids, strict=False) if c in _PATH_RANK]
        if paths and numa.get(min(paths)[1]) is not None:
            nic_numa[name] = numa[min(paths)[1]]
    return names, nic_numa
