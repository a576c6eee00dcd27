"""The device calls a GPU loan allows: how many, each one's limits, and which stages they reach.

The device tool lends a machine for a budget of device seconds (its ``status`` says how many are
left), in calls of at most 600 s, and counts the machine's start, the transfers and the idle
time between calls. ``plan(budget_s, stage_minutes)`` turns what is left into the calls of
docs/gpu-campaign.md, each with its ``CALL_S`` (the seconds ``scripts/gpu-call.sh`` may take:
the campaign inside it stops itself in time to pack the archive) and the tool's ``timeout_s``.
The constants are what the lent H100 took on 2026-11-25 (docs/results/h100/README.md).
"""
from __future__ import annotations

from dataclasses import dataclass

START_S = 35.0
"""A fresh machine's start with the first call (TVM part a stashed): 33 s measured."""
GAP_S = 20.0
"""Transfers and the pause before the next call, counted by the tool: 6-17 s measured."""
FIRST_SETUP_S = 20.0
"""TVM and NNI unpacked, the preflight and the smoke kernel, in the first campaign call."""
SETUP_S = 10.0
"""The preflight and the smoke kernel in a later call (TVM already unpacked)."""
PACK_S = 20.0
"""Kept by gpu-call.sh after the campaign to pack the archive and rewrite the README."""
MARGIN_S = 30.0
"""Between CALL_S and the tool's timeout_s: the call ends on its own before the tool kills it."""
CALL_MAX_S = 570.0
"""The longest call: the tool's 600 s less the margin."""
CALL_MIN_S = 150.0
"""A shorter call is not worth its overhead (under two minutes of campaign)."""
NO_START_S = 240.0
"""The tool starts no machine with less device time left than this."""
RESERVE_S = 75.0
"""Seconds before a call's end after which the campaign starts no trial (a build's limit is 60 s)."""


@dataclass(frozen=True)
class Call:
    number: int
    carry: tuple[str, ...]
    call_s: float
    """CALL_S for gpu-call.sh; 0 for the call that only stashes TVM's part a."""
    timeout_s: int
    campaign_s: float
    """Seconds the campaign runs inside the call (its ``--minutes``)."""
    device_s: float
    """Device seconds spent once this call has returned, the machine's start included."""
    reaches: str
    """The stages this call is expected to work on, from the stages' measured minutes."""

    @property
    def command(self) -> str:
        return f"CALL_S={self.call_s:.0f} bash scripts/gpu-call.sh" if self.call_s else "bash scripts/gpu-call.sh"


def plan(budget_s: float, stage_minutes: dict[str, float]) -> list[Call]:
    """The calls for ``budget_s`` device seconds left, none when too few to start a machine.
    ``stage_minutes``: the campaign's stages (and comparison steps) in order, with the minutes of
    work each takes; each call is labelled with those its share of the work falls on."""
    if budget_s < max(NO_START_S, START_S + CALL_MIN_S + GAP_S + MARGIN_S):
        return []
    calls = [Call(1, (".devcarry/tvm-a",), 0.0, 60, 0.0, START_S, "TVM part a stashed")]
    left, spent, work_done = budget_s - START_S, START_S, 0.0
    while True:
        call_s = min(CALL_MAX_S, left - GAP_S - MARGIN_S)
        if call_s < CALL_MIN_S:
            break
        first = len(calls) == 1
        campaign_s = call_s - (FIRST_SETUP_S if first else SETUP_S) - PACK_S
        work = max(0.0, campaign_s - RESERVE_S) / 60
        reaches = _reaches(stage_minutes, work_done, work_done + work)
        work_done += work
        left -= call_s + GAP_S
        spent += call_s + GAP_S
        carry = (".devcarry/tvm-b", ".devcarry/py", ".devcarry/campaign") if first else ()
        calls.append(Call(len(calls) + 1, carry, call_s, int(call_s + MARGIN_S), campaign_s, spent, reaches))
    return calls


def _reaches(stage_minutes: dict[str, float], start: float, end: float) -> str:
    """The stages whose minutes overlap the span [start, end) of the campaign's work."""
    names, at = [], 0.0
    for name, minutes in stage_minutes.items():
        if at < end and at + minutes > start:
            whole = start <= at and at + minutes <= end
            names.append(name if whole else f"{name} (part)")
        at += minutes
    return ", ".join(names) or "nothing left: the campaign is done"


def render(calls: list[Call]) -> str:
    """The plan as the Markdown table docs/gpu-campaign.md shows."""
    if not calls:
        return (f"Too little device time for a call: the tool starts no machine under {NO_START_S:.0f} s, and a "
                f"campaign call needs about {START_S + CALL_MIN_S + GAP_S + MARGIN_S:.0f} s with the start.")
    lines = ["| call | carry | command | timeout_s | campaign s | device s after | works on |",
             "|---|---|---|---|---|---|---|"]
    for call in calls:
        carry = ", ".join(f"`{path}`" for path in call.carry) or "nothing"
        lines.append(f"| {call.number} | {carry} | `{call.command}` | {call.timeout_s} | {call.campaign_s:.0f} | "
                     f"{call.device_s:.0f} | {call.reaches} |")
    return "\n".join(lines)
