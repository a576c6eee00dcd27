"""A CUDA template's static limits against ptxas and nvcc's time, built here (nvcc, no GPU).

The static check refuses a configuration whose estimated registers per thread exceed what
ptxas gives a block of its threads, so that no admitted kernel spills to local memory; an
estimate too high loses space instead. For each workload this draws configurations the check
admits and configurations it refuses by one rule alone (``--rule``: the register estimate, or
another, such as the GEMM's multiply-adds written out) with a value at most ``--near`` times the
limit (the refusals that might be wrong), compiles each for an H100 with TVM's own nvcc command
(what a trial's kernel gets), times the build and reads the registers and local memory ptxas
recorded in the cubin; it also counts the share of the workload's space that the check admits
(``--space-draws`` uniform random configurations). Prints figures and, with ``--out``, writes
them as a section of a results page, one section per rule; it asserts nothing.

    nni-opevo registers --workloads MM1 MM2 MM3 BMM1 BMM2 BMM3 --draws 40 --out docs/results/cuda-registers
    nni-opevo registers --rule "multiply-adds written out" --near 4 --out docs/results/cuda-registers

A workload named ``module:function`` is a user's operator at its default shape
(``examples.operators:attention``), its template derived from its computation.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nni_opevo_bench.cubin import resources
from nni_opevo_bench.machine import describe
from trial_code import kernel, targets, workloads
from trial_code.cli import add_number, description
from trial_code.constraint import admitted_share, draw
from trial_code.files import replace_text, user_cache
from trial_code.templates import for_workload

H100 = targets.h100()
RULE = "estimated registers per thread"
"""The rule whose refusals are drawn unless ``--rule`` names another."""
ROWS = Path(user_cache()) / "registers.jsonl"
RULE_TRIES = 20_000
"""Random configurations of each workload in which ``--rule`` must refuse one, or the command stops."""
SEED_STRIDE = 100_000
"""Seeds of one draw's search for a refusal near the limit: draw ``d`` tries seeds
``d * SEED_STRIDE`` on, so no two draws share one."""


def _refused_near(workload: workloads.Workload, draw_index: int, near: float, rule: str
                  ) -> tuple[dict[str, Any] | None, str]:
    """A configuration the check refuses by ``rule`` alone, with a value at most ``near`` times
    the limit (None when 1,000 seeds find none)."""
    for seed in range(draw_index * SEED_STRIDE, draw_index * SEED_STRIDE + 1000):
        params, message = draw(workload, H100, seed, refused_by=(rule,))
        if params is None:
            return None, ""
        estimate, most = (int(number) for number in re.findall(r"\d+", message)[-2:])
        if estimate <= near * most:
            return params, message
    return None, ""


def compiled(params: dict[str, Any], workload: workloads.Workload) -> dict[str, Any]:
    """Registers (the most of any of the kernels), what ptxas may give (the budget of the
    largest block, from ``__launch_bounds__``), bytes of local memory a thread (the most of any
    kernel) and the seconds TVM and nvcc took (a trial's build). Local memory below the budget is
    ptxas's own trade (fewer registers for more blocks an SM), not a tile that ran out of
    registers."""
    started = time.perf_counter()
    source = kernel.source(kernel.build(kernel.scheduled(workload, params, H100), H100), H100)
    threads = max((int(n) for n in re.findall(r"__launch_bounds__\((\d+)\)", source)), default=1)  # none: one thread
    found = resources(kernel.compile_cuda_source(source, H100)).values()
    return {"registers": max(each.registers for each in found), "budget": targets.registers_per_thread(threads),
            "local": max(each.local_bytes for each in found), "seconds": round(time.perf_counter() - started, 2)}


def compile_request() -> None:
    """``compiled`` for the workload and parameters a JSON object on stdin names, its figures (or
    the error's first line) as a JSON object on stdout: the program ``compiled_within`` runs."""
    request = json.load(sys.stdin)
    try:
        print(json.dumps(compiled(request["params"], workloads.named_or_operator(request["workload"]))))
    except Exception as error:  # noqa: BLE001 (the parent reports it in the row)
        print(json.dumps({"error": (str(error).strip().splitlines() or [type(error).__name__])[0][:200]}))


_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()


def compiled_within(name: str, params: dict[str, Any], limit_s: float) -> dict[str, Any]:
    """``compiled`` in a program of its own session, killed with its compilers past ``limit_s``:
    nvcc's front end runs for more than half an hour on some unrolled tiles the check refuses."""
    process = subprocess.Popen([sys.executable, "-c", "from nni_opevo_bench import registers; "
                                "registers.compile_request()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    with _running_lock:
        _running.add(process)
    try:
        out, err = process.communicate(json.dumps({"workload": name, "params": params}), timeout=limit_s)
    except subprocess.TimeoutExpired:
        _kill_session(process)
        process.communicate()
        return {"error": f"compile past {limit_s:g} s", "timeout": True, "seconds": limit_s}
    finally:
        with _running_lock:
            _running.discard(process)
    if process.returncode:
        return {"error": (err.strip().splitlines() or [f"exit status {process.returncode}"])[-1][:200]}
    return json.loads(out)


def _kill_session(process: subprocess.Popen) -> None:
    """Kill a compile's session: the program and its nvcc, cicc and ptxas."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def measure(name: str, draw_index: int, near: float, limit_s: float, rule: str = RULE) -> list[dict[str, Any]]:
    """One admitted and one refused-near-the-limit draw of a workload, each compiled; a draw
    whose build fails or runs past the limit is a row with its error."""
    found = workloads.named_or_operator(name)
    rows = []
    admitted, _ = draw(found, H100, draw_index)
    refused, message = _refused_near(found, draw_index, near, rule)
    for kind, params in (("admitted", admitted), ("refused", refused)):
        if params is None:
            continue
        rows.append({"workload": name, "draw": draw_index, "kind": kind, "params": params,
                     "rule": message if kind == "refused" else "", **compiled_within(name, params, limit_s)})
    return rows


def table(rows: list[dict[str, Any]], names: list[str], shares: dict[str, float]) -> str:
    """One line per workload and one for all of them: the share of the space the check admits;
    admitted draws, those with local memory and of those the ones that used every register the
    budget allows (the estimate's misses); refusals near the limit and those that ptxas keeps
    free of local memory (space the estimate loses); the seconds each kind took to build."""
    lines = ["| workload | space admitted | admitted | with local memory (most bytes) | of which at the register "
             "budget | failed to build | refused near the limit | of which free of local memory | of which compiled "
             "past the limit | build s, admitted (median / max) | build s, refused (median / max) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in [*names, "all"] if len(names) > 1 else names:
        mine = [row for row in rows if name in ("all", row["workload"])]
        admitted = [row for row in mine if row["kind"] == "admitted"]
        refused = [row for row in mine if row["kind"] == "refused" and "error" not in row]
        late = sum(row.get("timeout", False) for row in mine if row["kind"] == "refused")
        spilled = [row for row in admitted if row.get("local")]
        most = max((row["local"] for row in spilled), default=0)
        exhausted = sum(row["registers"] >= row["budget"] for row in spilled)
        failed = sum("error" in row for row in admitted)
        share = f"{100 * shares[name]:.2f} %" if name in shares else "-"
        lines.append(f"| {name} | {share} | {len(admitted)} | {len(spilled)} ({most}) | {exhausted} | {failed} "
                     f"| {len(refused) + late} | {sum(row['local'] == 0 for row in refused)} | {late} "
                     f"| {_build_seconds(admitted)} | {_build_seconds([row for row in mine if row['kind'] == 'refused'])} |")
    return "\n".join(lines)


def _build_seconds(rows: list[dict[str, Any]]) -> str:
    """The median and the most seconds the rows' builds took, a build stopped at the limit counting
    as the limit (its max then shown as at least that); "-" for no build that got that far."""
    timed = sorted(row["seconds"] for row in rows if "seconds" in row)
    if not timed:
        return "-"
    late = any(row.get("timeout", False) for row in rows)
    return f"{statistics.median(timed):.1f} / {'>' if late else ''}{timed[-1]:.1f}"


def nvcc_version() -> str:
    """nvcc's version, e.g. ``13.0.88``."""
    shown = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"release [\d.]+, V([\d.]+)", shown)
    return found.group(1) if found else shown.strip().splitlines()[-1]


TITLE = "# The CUDA static check against ptxas and nvcc's time"


def section(rows: list[dict[str, Any]], names: list[str], shares: dict[str, float], run: dict[str, Any]) -> str:
    """One rule's section of the results page: what was built, the table, the command, machine
    and date."""
    return "\n".join([
        _heading(run["rule"]), "",
        f"The share of {run['space_draws']:,} uniform random configurations of each workload's space that the "
        f"static check admits (seed 0); {run['draws']} configurations a workload that it admits and "
        f"{run['draws']} that it refuses by the rule \"{run['rule']}\" alone, with a value at most {run['near']:g} "
        f"times the limit, built for {H100.arch} by TVM's own nvcc command (fast math, ptxas's register-usage level: "
        f"what a trial's kernel gets; a compile stopped after {run['limit']:g} s), timed (TVM's lowering and nvcc, "
        "a trial's build) and read from the cubin. An admitted "
        "configuration with local memory below its register budget is ptxas's own trade of a few spilled bytes "
        "for more blocks an SM; one at the budget would be a tile the estimate let run out of registers. A "
        "refusal free of local memory that built within the limit is space the rule may lose.", "",
        table(rows, names, shares), "",
        f"Command: `{run['command']}` (from the repository root). Machine: {run['machine']}, "
        f"nvcc {run['nvcc']}, no GPU. Run {run['started']} to {run['ended']}."])


def _heading(rule: str) -> str:
    return f"## The rule \"{rule}\""


def page(existing: str, rule: str, new: str) -> str:
    """The results page with ``rule``'s section replaced by ``new`` (or added): one section per
    rule, each regenerated by its own command, in the order of their rules."""
    sections = {part.split("\n", 1)[0]: "## " + part.rstrip("\n") for part in existing.split("\n## ")[1:]}
    sections[_heading(rule)[3:]] = new
    return "\n\n".join([TITLE, *(sections[heading] for heading in sorted(sections))]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nni-opevo registers", description=description(__doc__))
    parser.add_argument("--workloads", nargs="+", default=["MM1", "MM2", "MM3", "BMM1", "BMM2", "BMM3"],
                        help="named CUDA workloads (trial_code.workloads), or users' operators as module:function")
    add_number(parser, "--draws", int, 1, 10_000, help="admitted and refused draws per workload", default=20)
    add_number(parser, "--near", float, 1.0, 100.0, help="refusals drawn up to this many times the limit",
               default=2.0)
    add_number(parser, "--workers", int, 1, 256, help="compiles at once", default=2)
    add_number(parser, "--limit", float, 10, 3600, help="seconds a compile may take (a trial's build: 120)",
               default=120)
    parser.add_argument("--rule", default=RULE, help="words of the static check's rule whose refusals near its "
                                                     "limit are drawn (default: %(default)s)")
    add_number(parser, "--space-draws", int, 1, 1_000_000, default=20_000,
               help="random configurations a workload, to count the share the check admits")
    parser.add_argument("--out", type=Path, help="folder for the results page (README.md)")
    parser.add_argument("--rows", type=Path, default=ROWS, help="file for every row, as JSON lines "
                                                                "(default %(default)s)")
    args = parser.parse_args(argv)
    if shutil.which("nvcc") is None:
        sys.exit("registers: nvcc (the CUDA toolkit) is not on PATH")
    if importlib.util.find_spec("elftools") is None:
        sys.exit("registers: pyelftools is not installed (pip install 'nni-opevo[bench]')")
    for name in args.workloads:
        try:
            found = workloads.named_or_operator(name)
            for_workload(found).space(found, "cuda")  # a user's operator: imported and read, or refused
            family = found.family
        except ValueError as error:
            sys.exit(f"registers: --workloads {name}: {error}")
        if family not in ("matmul", "batch_matmul", "conv2d", "operator"):
            sys.exit(f"registers: --workloads {name} is not a GEMM, convolution or operator workload")
    if not any(draw(workloads.named_or_operator(name), H100, 0, refused_by=(args.rule,), tries=RULE_TRIES)[0]
               for name in args.workloads):
        sys.exit(f"registers: --rule {args.rule!r}: the static check refuses none of {RULE_TRIES:,} random "
                 "configurations of these workloads by a rule with those words")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    jobs = [(name, index) for name in args.workloads for index in range(args.draws)]
    try:
        with ThreadPoolExecutor(args.workers) as pool:
            measured = pool.map(lambda job: measure(*job, args.near, args.limit, args.rule), jobs)
            rows = [row for found in measured for row in found]
    except BaseException:
        with _running_lock:
            for process in list(_running):
                _kill_session(process)
        raise
    shares = {name: admitted_share(workloads.named_or_operator(name), H100, args.space_draws) for name in args.workloads}
    print(f"{args.draws} draws a workload, refusals by \"{args.rule}\" up to {args.near:g} times the limit, "
          f"built for {H100.arch} by TVM's nvcc command, read from the cubin; the share of "
          f"{args.space_draws} random configurations the check admits")
    print(table(rows, args.workloads, shares))
    if args.out:
        run = {"command": shlex.join(["nni-opevo", "registers", *(argv if argv is not None else sys.argv[1:])]),
               "machine": describe(), "nvcc": nvcc_version(), "started": started,
               "ended": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "draws": args.draws, "near": args.near,
               "limit": args.limit, "space_draws": args.space_draws,
               "rule": args.rule}
        args.out.mkdir(parents=True, exist_ok=True)
        readme = args.out / "README.md"
        existing = readme.read_text() if readme.is_file() else ""
        replace_text(readme, page(existing, args.rule, section(rows, args.workloads, shares, run)))  # other rules' sections
    args.rows.parent.mkdir(parents=True, exist_ok=True)
    replace_text(args.rows, "".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main()
