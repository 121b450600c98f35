"""Checks what distopt-plan --json says against its own rules: the chosen
configuration is the fastest predicted of those within the budget, every
one over the budget holds more than it, lossy ones are left out unless
allowed, and a configuration that makes the same step as another names it.

    python3 plan_check.py PLAN.json [--budget BYTES] [--allow-lossy]
"""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("plan")
parser.add_argument("--budget", type=float, default=0)
parser.add_argument("--allow-lossy", action="store_true")
args = parser.parse_args()
with open(args.plan) as f:
    plan = json.load(f)
candidates = plan["candidates"]
failures = []


def fail(message):
    failures.append(message)


by_options = {c["options"]: c for c in candidates}
if len(by_options) != len(candidates):
    fail("a configuration is listed twice")
ranked = [c for c in candidates if c["status"] in ("chosen", "feasible")]
chosen = [c for c in candidates if c["status"] == "chosen"]
if ranked and (len(chosen) != 1 or ranked[0] is not chosen[0]):
    fail("not exactly one chosen configuration, listed first")
if chosen and plan.get("chosen") != chosen[0]["options"]:
    fail("'chosen' is not the chosen candidate's options")
for c in ranked:
    if chosen and c["predicted_ms"] < chosen[0]["predicted_ms"]:
        fail(f"faster than the chosen one: {c['options']}")
    if args.budget and c["memory_bytes"] > args.budget:
        fail(f"over the budget but feasible: {c['options']}")
for c in candidates:
    lossy = "powersgd-rank=" in c["options"] or "reduce-dtype=none" in c["options"]
    if lossy != c["lossy"]:
        fail(f"lossy is {c['lossy']} for {c['options']}")
    if c["status"] == "lossy" and args.allow_lossy:
        fail(f"left out as lossy though allowed: {c['options']}")
    if c["lossy"] and not args.allow_lossy and c["status"] != "lossy":
        fail(f"lossy but considered: {c['options']}")
    if c["status"] == "over-budget" and not (args.budget and c["memory_bytes"] > args.budget):
        fail(f"within the budget but said over it: {c['options']}")
    if c["status"] == "same-step" and c["same_step_as"] not in by_options:
        fail(f"the same step as an unknown configuration: {c['options']}")
    if c["status"] == "refused" and not c.get("why"):
        fail(f"refused without a reason: {c['options']}")
for message in failures:
    print("FAIL:", message)
statuses = sorted({c["status"] for c in candidates})
print(f"{'FAILED' if failures else 'ok'}: {len(candidates)} candidates ({', '.join(statuses)})")
sys.exit(1 if failures else 0)
