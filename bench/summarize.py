"""Summary table for bench/run.sh: summarize.py RESULTS_DIR VARIANT... (first = ours).

Prints absolute figures per server and ratios ours/<each reference>. Exits 1 if any
measurement is invalid (errors), so run.sh fails loudly.
"""

from __future__ import annotations

import json
import os
import sys


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def kib(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                k, v = line.split(":", 1)
                out[k.strip()] = int(v.split()[0])
    except OSError:
        pass
    return out


def fmt(v, spec: str = ".1f", unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{spec}}{unit}"


def ratio(a, b) -> str:
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def main() -> int:
    results, variants = sys.argv[1], sys.argv[2:]
    rows: dict[str, dict] = {}
    invalid: list[str] = []
    for v in variants:
        d = os.path.join(results, v)
        w = load(os.path.join(d, "wrk.json")) or {}
        dr = load(os.path.join(d, "drain.json")) or {}
        rss = kib(os.path.join(d, "rss-end.txt"))
        cpu = load(os.path.join(d, "cpu.json")) or {}
        wrk_err = None
        if w:
            wrk_err = (w["bad"] + w["err_connect"] + w["err_read"] + w["err_write"]
                       + w["err_timeout"])
            if wrk_err:
                invalid.append(f"{v}: tasks/get had {wrk_err} errors ({w.get('bad_sample')})")
        else:
            invalid.append(f"{v}: no wrk result")
        if dr and dr.get("errors"):
            invalid.append(f"{v}: drain had {dr['errors']} errors, e.g. {dr['error_samples'][:2]}")
        if dr and dr.get("timed_out"):
            drain_txt = f"TIMEOUT>{dr['timeout_s']:.0f}s ({dr['completed']}/{dr['count']} done)"
        else:
            drain_txt = fmt(dr.get("drain_wall_s"), ".1f", " s")
        rows[v] = {
            "rps": w.get("rps"),
            "p50": w.get("p50_ms"),
            "p99": w.get("p99_ms"),
            "wrk_err": wrk_err,
            "requests": w.get("requests"),
            "drain": dr.get("drain_wall_s"),
            "drain_txt": drain_txt,
            "drain_srv": dr.get("drain_server_s"),
            "creates_s": dr.get("creates_per_s"),
            "create_p99": dr.get("create_p99_ms"),
            "drain_err": dr.get("errors"),
            "wrk_cpu": cpu.get("wrk_cpu_s"),
            "drain_cpu": cpu.get("drain_cpu_s"),
            "us_per_get": (cpu["wrk_cpu_s"] / w["requests"] * 1e6)
            if cpu.get("wrk_cpu_s") is not None and w.get("requests") else None,
            "hwm_mib": rss["VmHWM"] / 1024 if "VmHWM" in rss else None,
        }

    metrics = [
        ("tasks/get req/s (higher=better)", "rps", ".0f", ""),
        ("tasks/get p50 latency", "p50", ".2f", " ms"),
        ("tasks/get p99 latency", "p99", ".2f", " ms"),
        ("tasks/get requests / errors", None, None, None),
        ("drain wall time, client-observed", "drain", None, None),
        ("drain, last server completion", "drain_srv", ".1f", " s"),
        ("drain create rate", "creates_s", ".0f", " /s"),
        ("drain create p99 latency", "create_p99", ".1f", " ms"),
        ("drain errors", "drain_err", "d", ""),
        ("server CPU during tasks/get run", "wrk_cpu", ".1f", " s"),
        ("server CPU per tasks/get", "us_per_get", ".0f", " us"),
        ("server CPU during drain", "drain_cpu", ".1f", " s"),
        ("peak RSS (VmHWM)", "hwm_mib", ".1f", " MiB"),
    ]
    ours, refs = variants[0], variants[1:]
    header = ["metric"] + variants + [f"{ours}/{r}" for r in refs]
    table = []
    for label, key, spec, unit in metrics:
        line = [label]
        for v in variants:
            r = rows[v]
            if key is None:
                line.append(f"{fmt(r['requests'], 'd')} / {fmt(r['wrk_err'], 'd')}")
            elif key == "drain":
                line.append(r["drain_txt"])
            else:
                line.append(fmt(r[key], spec, unit))
        for ref in refs:
            if key in ("rps", "p50", "p99", "drain", "drain_srv", "creates_s", "create_p99",
                       "wrk_cpu", "us_per_get", "drain_cpu", "hwm_mib"):
                line.append(ratio(rows[ours][key], rows[ref][key]))
            else:
                line.append("")
        table.append(line)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    sep = "  "
    print()
    print(sep.join(h.ljust(w) for h, w in zip(header, widths)))
    print(sep.join("-" * w for w in widths))
    for line in table:
        print(sep.join(str(x).ljust(w) for x, w in zip(line, widths)))
    print()
    print("ratios are ours/reference: for req/s >1 means ours is faster; for latency, time "
          "and RSS <1 means ours is better.")
    print()
    print("exact commands:")
    for v in variants:
        d = os.path.join(results, v)
        for f in ("server-cmd.txt", "wrk-cmd.txt", "drain-cmd.txt"):
            try:
                with open(os.path.join(d, f)) as fh:
                    print(f"  [{v}] {fh.read().strip()}")
            except OSError:
                pass
    print(f"\nraw output: {results}")
    if invalid:
        print("\nINVALID measurements:")
        for i in invalid:
            print(f"  - {i}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
