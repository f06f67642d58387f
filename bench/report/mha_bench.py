#!/usr/bin/python3
"""Run the mha benchmarks and turn their output into records, tables, plots and reports.

Subcommands (see bench/results/README.md for the full story):
  headline --build DIR [--out DIR]   ~2 minute headline selection, table + record + plots
  run --build DIR [--suite S] [--threads 1,2] [--isa avx2,avx512] [--repetitions N] [--out DIR]
  report RECORD.json [--out DIR]     table + plots + report.md from a record
  compare A.json B.json [...]        side-by-side times and ratios of configs common to all
  spread A.json B.json [...]         repeated runs of one machine: ours, oneDNN, OpenBLAS and
                                     the lowest/median/highest ratio per config
  smoke --build DIR                  tiny end-to-end run (CI): one config per suite, plots
  bundle --build DIR [--threads 1,16] [--python PATH] [--out DIR]
                                     the key rows, ours and PyTorch, in minutes (bench bundle)
  crosscpu [LABEL=]A.json [LABEL=]B.json+C.json ...
                                     ours on the key rows across machines, one column each

A record is a JSON file holding the Google Benchmark JSON of every binary run
plus a "machine" section (CPU, cores, caches, ISAs, library version, compiler,
measured peaks), so records from different machines can be compared.

Benchmark names follow <suite>/<config>/<impl>/threads:<t> (bench/common/bench_common.hpp).
Only python3's standard library and matplotlib (Agg backend) are used. Every
user error ends in one line on stderr and exit status 2, never a traceback.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import threading

RECORD_FORMAT = "mha-bench-record"
RECORD_VERSION = 1
SUITE_BINARY = {"gemm": "bench_gemm", "softmax": "bench_softmax", "attention": "bench_attention"}
# bench_softmax also carries the reshape suite.
SUITE_PREFIXES = {"gemm": ["gemm"], "softmax": ["softmax", "reshape"], "attention": ["attention"]}
SUITE_ORDER = ["gemm", "softmax", "reshape", "attention"]
BASELINES = ("onednn", "openblas")  # "best baseline" is the faster of these
# PyTorch's nn.MultiheadAttention (torch_mha.py) and the bf16 compositions: baselines too,
# and a bf16 row of ours is measured against the fastest of all of them.
PYTORCH = ("pytorch", "pytorch_bf16")
BF16_BASELINES = ("onednn_bf16", "pytorch_bf16")
SHAPE_RE = re.compile(r"^E(?P<E>\d+) H(?P<H>\d+)(?: KV(?P<KV>\d+))? B(?P<B>\d+) Sq(?P<Sq>\d+) Skv(?P<Skv>\d+)"
                      r"(?P<causal> causal)?(?P<decode> decode)?$")
TORCH_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_mha.py")
TORCH_MISSING = 3  # torch_mha.py's exit status when torch cannot be imported
REFERENCES = ("plain", "memcpy")  # used for the ratio only where no baseline ran
NAME_RE = re.compile(r"^(?P<suite>[^/]+)/(?P<config>.+)/(?P<impl>[^/]+)/threads:(?P<threads>\d+)"
                     r"(?P<rest>/.*)?$")
TIME_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
# Environment that changes what a bench binary measures; recorded per run.
BASELINE_ISA_KEYS = ("ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE")  # see BASELINE_ISA_ENV
RECORDED_ENV = ("MHA_ISA", "MHA_BENCH_THREADS", "MHA_NUM_THREADS", "OMP_WAIT_POLICY",
                "OPENBLAS_THREAD_TIMEOUT", "OMP_NUM_THREADS",
                "OPENBLAS_NUM_THREADS") + BASELINE_ISA_KEYS
ISAS = ("scalar", "avx2", "avx512", "neon")  # the MHA_ISA spellings
# The baselines' instruction sets belong to the tool: oneDNN's ONEDNN_MAX_CPU_ISA and
# the kernel family of OpenBLAS's DYNAMIC_ARCH build (OPENBLAS_CORETYPE). A run with
# no MHA_ISA clears both, so each library picks its best for the CPU as mha does: an
# image may set OPENBLAS_CORETYPE=Haswell globally, which holds OpenBLAS to its AVX2
# kernels (Zen 5, sq1024, 1 thread: 23.1 ms, 11.8 ms as SkylakeX, where oneDNN takes
# 12.0). A run under MHA_ISA=<isa> caps both to that ISA, so its rows are compared on
# the same instruction set (an AVX2 row against AVX-512 oneDNN read sq1024 as 0.54x).
BASELINE_ISA_ENV = {
    "scalar": {"ONEDNN_MAX_CPU_ISA": "SSE41", "OPENBLAS_CORETYPE": "Nehalem"},
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
    "avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "OPENBLAS_CORETYPE": "SkylakeX"},
}
SKIP_EXIT = 77  # bench binaries: MHA_ISA names an ISA this CPU cannot run


class UserError(Exception):
    """An error the user can fix; reported as one line, exit status 2."""


def eprint(*args):
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- machine


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_model():
    info = read_text("/proc/cpuinfo") or ""
    fields = {}
    for line in info.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    for key in ("model name", "Model", "Hardware", "cpu model"):
        if fields.get(key):
            return fields[key]
    if "CPU part" in fields:  # aarch64 without a model name
        return "{} (implementer {}, part {})".format(platform.machine(),
                                                     fields.get("CPU implementer", "?"),
                                                     fields["CPU part"])
    return platform.processor() or platform.machine() or "unknown"


def physical_cores():
    info = read_text("/proc/cpuinfo") or ""
    cores = set()
    phys = core = None
    for line in info.splitlines() + [""]:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            phys = value.strip()
        elif key == "core id":
            core = value.strip()
        elif not line.strip():
            if core is not None:
                cores.add((phys, core))
            phys = core = None
    return len(cores) or None


def getconf_cache_sizes():
    """Cache sizes from glibc (CPUID on x86), for kernels that do not expose
    /sys/devices/system/cpu/cpu0/cache (seen on a Firecracker guest), in sysfs' style."""
    names = {"LEVEL1_DCACHE_SIZE": "L1d", "LEVEL1_ICACHE_SIZE": "L1i",
             "LEVEL2_CACHE_SIZE": "L2", "LEVEL3_CACHE_SIZE": "L3"}
    try:
        out = subprocess.run(["getconf", "-a"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    caches = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in names and parts[1].isdigit() and int(parts[1]) > 0:
            caches[names[parts[0]]] = "{}K".format(int(parts[1]) // 1024)
    return caches


def cache_sizes():
    base = "/sys/devices/system/cpu/cpu0/cache"
    caches = {}
    try:
        entries = sorted(e for e in os.listdir(base) if e.startswith("index"))
    except OSError:
        entries = []
    for entry in entries:
        level = read_text(os.path.join(base, entry, "level"))
        kind = read_text(os.path.join(base, entry, "type")) or ""
        size = read_text(os.path.join(base, entry, "size"))
        if not level or not size:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches["L" + level + suffix] = size
    return caches or getconf_cache_sizes()


def machine_section(runs, threads):
    """The record's machine section, from this host and the runs' context keys."""
    contexts = [r["gbench"].get("context", {}) for r in runs if r.get("gbench")]
    first = contexts[0] if contexts else {}
    available = [s for s in first.get("mha_isas_available", "").split(",") if s]
    unforced = [c.get("mha_isa") for r, c in zip(runs, contexts) if "MHA_ISA" not in r["env"]]
    peaks = {}
    for c in contexts:
        isa = c.get("mha_isa", "?")
        for key, value in c.items():
            m = re.fullmatch(r"peak_gflops_(\d+)t", key)
            if m:
                # Each binary measures its own; on a busy machine the best is the
                # closest to the hardware's.
                per_isa = peaks.setdefault(isa, {})
                per_isa[m.group(1)] = max(per_isa.get(m.group(1), 0.0), float(value))
    triad = [float(c["triad_gbps_1t"]) for c in contexts if "triad_gbps_1t" in c]
    return {
        "cpu_model": cpu_model(),
        "arch": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": physical_cores(),
        "caches": cache_sizes(),
        "os": platform.platform(),
        "isa_chosen": (unforced[0] if unforced else (available[0] if available else None)),
        "isas_available": available,
        "isas_run": sorted({c.get("mha_isa") for c in contexts if c.get("mha_isa")}),
        "mha_version": first.get("mha_version"),
        "mha_git_rev": first.get("mha_git_rev"),
        "compiler": first.get("compiler"),
        "threads": threads,
        "peak_gflops": peaks,
        "triad_gbps_1t": max(triad) if triad else None,
        "gbench_cpu": {k: first.get(k) for k in ("num_cpus", "mhz_per_cpu", "library_build_type")
                       if k in first},
    }


# ---------------------------------------------------------------- records


def load_record(path):
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except OSError as e:
        raise UserError("{}: cannot read: {}".format(path, e.strerror or e))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError("{}: not valid JSON ({})".format(path, e))
    if not isinstance(record, dict) or not isinstance(record.get("machine"), dict):
        raise UserError("{}: not an mha benchmark record (no 'machine' section); records are "
                        "written by 'mha_bench.py run' or 'headline'".format(path))
    runs = record.get("runs")
    if not isinstance(runs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("gbench"), dict) and
            isinstance(r["gbench"].get("benchmarks", []), list) for r in runs):
        raise UserError("{}: malformed record: 'runs' must be a list of objects each holding "
                        "Google Benchmark JSON under 'gbench'".format(path))
    for run in runs:
        gbench = run["gbench"]
        if not isinstance(gbench.get("context", {}), dict) or not all(
                isinstance(b, dict) and isinstance(b.get("name"), str)
                for b in gbench.get("benchmarks", [])):
            raise UserError("{}: malformed record: a Google Benchmark 'context' is not an object "
                            "or a benchmark entry has no 'name'".format(path))
    machine = record["machine"]
    for key in ("caches", "peak_gflops"):
        if not isinstance(machine.get(key, {}), dict):
            raise UserError("{}: malformed record: machine.{} is not an object".format(path, key))
    record["path"] = path
    return record


def parse_name(name):
    m = NAME_RE.match(name)
    if not m:
        return None
    return m.group("suite"), m.group("config"), m.group("impl"), int(m.group("threads"))


def to_float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def results(record):
    """One row per (suite, config, impl, threads, isa): the median over repetitions.

    Malformed benchmark entries raise UserError naming the record."""
    rows = {}
    order = []
    path = record.get("path", "record")
    for run in record["runs"]:
        context = run["gbench"].get("context", {})
        isa = context.get("mha_isa") or run.get("isa") or "?"
        bf16_kernel = context.get("mha_bf16_kernel")
        groups = {}
        for b in run["gbench"].get("benchmarks", []):
            if not isinstance(b, dict) or "name" not in b:
                raise UserError("{}: malformed benchmark entry (no 'name')".format(path))
            run_name = b.get("run_name", b["name"])
            groups.setdefault(run_name, []).append(b)
        for run_name, entries in groups.items():
            parsed = parse_name(run_name)
            if parsed is None:
                continue
            errors = [e for e in entries if e.get("error_occurred")]
            medians = [e for e in entries
                       if e.get("run_type") == "aggregate" and e.get("aggregate_name") == "median"]
            iterations = [e for e in entries if e.get("run_type", "iteration") == "iteration"]
            if medians:
                chosen = medians[0]
            elif iterations:
                chosen = sorted(iterations, key=lambda e: to_float(e.get("real_time")) or 0.0)[
                    (len(iterations) - 1) // 2]
            else:
                continue
            cv = [e for e in entries
                  if e.get("run_type") == "aggregate" and e.get("aggregate_name") == "cv"]
            unit = TIME_UNIT_MS.get(chosen.get("time_unit", "ns"))
            real_time = to_float(chosen.get("real_time"))
            if unit is None or (real_time is None and not errors):
                raise UserError("{}: malformed benchmark entry '{}' (real_time/time_unit)".format(
                    path, chosen["name"]))
            suite, config, impl, threads = parsed
            key = (suite, config, impl, threads, isa)
            row = {
                "suite": suite, "config": config, "impl": impl, "threads": threads, "isa": isa,
                # The bf16 kernel set a bf16 row of ours ran on (amx_bf16, avx512_bf16, ...).
                "kernel": bf16_kernel if impl == "mha_bf16" else None,
                "ms": None if errors else real_time * unit,
                "gflops": to_float(chosen.get("GFLOPS")),
                "peak_pct": to_float(chosen.get("peak_pct")),
                "gbps": to_float(chosen.get("GBps")),
                "cv_pct": (to_float(cv[0].get("real_time")) * 100.0
                           if cv and to_float(cv[0].get("real_time")) is not None else None),
                "error": errors[0].get("error_message", "error") if errors else None,
            }
            if key not in rows:
                order.append(key)
            rows[key] = row
    return [rows[k] for k in order]


def suite_rank(suite):
    return SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER)


def primary_isa(record, rows):
    isas = []
    for r in rows:
        if r["isa"] not in isas:
            isas.append(r["isa"])
    chosen = record["machine"].get("isa_chosen")
    if chosen in isas:
        return chosen
    return isas[0] if isas else chosen


def best_baseline(rows, row):
    """Fastest baseline row (oneDNN, OpenBLAS, PyTorch; for a bf16 row of ours, their bf16
    rows too) for row's config and threads (same ISA run preferred), or a plain/memcpy
    reference where no baseline ran."""
    fp32 = BASELINES + PYTORCH[:1]
    for pool in (fp32 + BF16_BASELINES if row["impl"] == "mha_bf16" else fp32, REFERENCES):
        candidates = [r for r in rows
                      if r["impl"] in pool and r["ms"] is not None and
                      (r["suite"], r["config"], r["threads"]) ==
                      (row["suite"], row["config"], row["threads"])]
        same_isa = [r for r in candidates if r["isa"] == row["isa"]]
        candidates = same_isa or candidates
        if candidates:
            return min(candidates, key=lambda r: r["ms"])
    return None


# ---------------------------------------------------------------- tables


def fmt(value, spec, empty="-"):
    return empty if value is None else format(value, spec)


def render_table(headers, body, aligns):
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *body)] if body else [
        len(h) for h in headers]
    lines = []
    for cells in [headers] + body:
        parts = [str(c).ljust(w) if a == "<" else str(c).rjust(w)
                 for c, w, a in zip(cells, widths, aligns)]
        lines.append("  ".join(parts).rstrip())
        if cells is headers:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers, body, aligns):
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---:" if a == ">" else ":---" for a in aligns) + "|"]
    lines += ["| " + " | ".join(str(c) for c in cells) + " |" for cells in body]
    return "\n".join(lines)


HEADLINE_HEADERS = ["configuration", "thr", "isa", "ms", "GFLOP/s", "%peak", "GB/s",
                    "best baseline", "ratio"]
HEADLINE_ALIGNS = ["<", ">", "<", ">", ">", ">", ">", "<", ">"]
RATIO_NOTE = ("ratio = best baseline time / mha time (>1: mha is faster); best baseline = the "
              "fastest of oneDNN, OpenBLAS and PyTorch for the same configuration and threads "
              "(for a bf16 row, their bf16 rows too); %peak is against the measured peak of "
              "the ISA at that thread count (FMA; for a bf16 row, named by its kernel set, that "
              "set's own: resident tdpbf16ps for amx_bf16, vdpbf16ps for avx512_bf16, FMA for "
              "the widening sets).")


# Our implementations: mha, mha_prepacked (GEMM with B packed once, as the attention
# engine uses its weights) and mha_bf16 (an attention object computing in bf16), which the
# tables list under "<config> prepacked" and "<config> bf16".
OURS = ("mha", "mha_prepacked", "mha_bf16")
OUR_SUFFIX = {"mha": "", "mha_prepacked": " prepacked", "mha_bf16": " bf16"}


def our_label(suite, config, impl):
    return suite + "/" + config + OUR_SUFFIX[impl]


def shown_isa(row):
    """What a row ran on: the ISA, or for a bf16 row of ours its kernel set."""
    return row.get("kernel") or row["isa"]


def headline_body(rows):
    """Rows of the compact table: every result of ours (or, for configs with none, nothing:
    baselines appear through the ratio)."""
    ours = [r for r in rows if r["impl"] in OURS]
    first_seen = {}
    for i, r in enumerate(ours):
        first_seen.setdefault((r["suite"], r["config"]), i)
    lead_isa = ours[0]["isa"] if ours else None
    ours.sort(key=lambda r: (suite_rank(r["suite"]), first_seen[(r["suite"], r["config"])],
                             r["threads"], r["isa"] != lead_isa, r["isa"], r["impl"]))
    body = []
    for r in ours:
        base = best_baseline(rows, r)
        label = our_label(r["suite"], r["config"], r["impl"])
        if r["ms"] is None:
            body.append([label, r["threads"], shown_isa(r), "-", "-", "-",
                         "-", "error: " + (r["error"] or "?"), "-"])
            continue
        body.append([
            label, r["threads"], shown_isa(r), fmt(r["ms"], ".3f"),
            fmt(r["gflops"], ".1f"), fmt(r["peak_pct"], ".1f"), fmt(r["gbps"], ".1f"),
            "{} {:.3f} ms".format(base["impl"], base["ms"]) if base else "-",
            "{:.2f}x".format(base["ms"] / r["ms"]) if base and r["ms"] > 0 else "-",
        ])
    return body


def machine_lines(machine):
    caches = machine.get("caches") or {}
    peaks = machine.get("peak_gflops") or {}
    peak_text = "; ".join("{} {}".format(isa, ", ".join(
        "{}t {:.4g}".format(t, v) for t, v in sorted(per.items(), key=lambda kv: int(kv[0]))))
        for isa, per in sorted(peaks.items()))
    cpu = "{} ({} logical CPUs, {} cores, {})".format(
        machine.get("cpu_model"), machine.get("logical_cpus"), machine.get("physical_cores"),
        machine.get("arch"))
    if machine.get("load_average_1m") is not None:
        cpu += "; load average {:.1f} at the start".format(machine["load_average_1m"])
    if machine.get("emulator"):
        cpu += "; binaries ran under '{}': timings mean nothing".format(machine["emulator"])
    return [
        ("CPU", cpu),
        ("caches", ", ".join("{} {}".format(k, v) for k, v in sorted(caches.items())) or "-"),
        ("ISA", "{} (available: {})".format(machine.get("isa_chosen"),
                                            ",".join(machine.get("isas_available") or []))),
        ("mha", "{} (git {}), {}".format(machine.get("mha_version"), machine.get("mha_git_rev"),
                                         machine.get("compiler"))),
        ("threads", ",".join(str(t) for t in machine.get("threads") or [])),
        ("peak GFLOP/s", peak_text or "-"),
        ("triad GB/s (1t)", fmt(machine.get("triad_gbps_1t"), ".1f")),
    ]


PYTORCH_HEADERS = ["configuration", "thr", "ours fp32 ms", "PyTorch fp32 ms", "ratio",
                   "ours bf16 ms", "PyTorch bf16 ms", "ratio"]
PYTORCH_NOTE = ("PyTorch, same shapes and threads (nn.MultiheadAttention; Linear + "
                "scaled_dot_product_attention for GQA and decode; torch.matmul for GEMM; "
                "ratio = PyTorch time / ours):")


def pytorch_body(rows, isa):
    """Ours at the primary ISA `isa` against PyTorch, per precision, where PyTorch ran: attention
    configs by name, GEMM shapes as gemm/<shape> (bf16: the bf16_<shape> rows). Rows of ours
    from an MHA_ISA sweep are left out: PyTorch ran once, with its own best ISA."""
    times = {(r["suite"], r["config"], r["threads"], r["impl"]): r["ms"] for r in rows
             if r["suite"] in ("attention", "gemm") and r["ms"] is not None and
             (r["isa"] == isa or r["impl"] in PYTORCH)}
    body = []
    for suite, config, threads in dict.fromkeys(
            (s, c, t) for s, c, t, i in times
            if i in PYTORCH and not (s == "gemm" and c.startswith("bf16_"))):
        if suite == "gemm":
            pairs = (((config, "mha"), (config, "pytorch")),
                     (("bf16_" + config, "mha"), ("bf16_" + config, "pytorch")))
            cells = ["gemm/" + config, threads]
        else:
            pairs = (((config, "mha"), (config, "pytorch")),
                     ((config, "mha_bf16"), (config, "pytorch_bf16")))
            cells = [config, threads]
        for ours, theirs in pairs:
            a = times.get((suite, ours[0], threads, ours[1]))
            b = times.get((suite, theirs[0], threads, theirs[1]))
            cells += [fmt(a, ".3f"), fmt(b, ".3f"),
                      "{:.2f}x".format(b / a) if a and b else "-"]
        body.append(cells)
    return body


def headline_text(record, rows):
    lines = ["{:<16} {}".format(k + ":", v) for k, v in machine_lines(record["machine"])]
    body = headline_body(rows)
    if not body:
        lines.append("(no mha results in this record)")
    else:
        lines += ["", render_table(HEADLINE_HEADERS, body, HEADLINE_ALIGNS), "", RATIO_NOTE]
    torch_body = pytorch_body(rows, primary_isa(record, rows))
    if torch_body:
        lines += ["", PYTORCH_NOTE, "",
                  render_table(PYTORCH_HEADERS, torch_body, ["<", ">"] + [">"] * 6)]
    notes = [s for s in record.get("skipped", []) if s.startswith("pytorch")]
    lines += [""] + notes if notes else []
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plots


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def short_cpu(machine):
    model = machine.get("cpu_model") or "unknown CPU"
    model = re.sub(r"\((R|TM|tm)\)|CPU|Processor|\s+@.*$", "", model)
    return re.sub(r"\s+", " ", model).strip()


def plot_metric(rows):
    return ("gflops", "GFLOP/s") if any(r["gflops"] for r in rows) else ("gbps", "GB/s")


def bar_chart(plt, path, title, ylabel, groups, series, values, ref_line=None, log_ok=True):
    """Grouped bars: values[(group, series)]; missing pairs are left empty."""
    # Wide enough for the labels, but capped: the full suite has ~100 configs.
    width_in = min(24.0, max(6.0, 0.4 * len(groups) * max(1, len(series)) + 3))
    fig, ax = plt.subplots(figsize=(width_in, 4.5 if len(groups) < 40 else 6.0))
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = [values.get((grp, s), 0.0) or 0.0 for grp in groups]
        ax.bar(xs, ys, width, label=s)
    if ref_line is not None:
        ax.axhline(ref_line, color="black", linewidth=0.8, linestyle="--")
    positive = [v for v in values.values() if v]
    if log_ok and positive and max(positive) > 30 * min(positive):
        # Shapes from GEMV to sq1024 span two orders of magnitude: a linear
        # axis would flatten the small ones to nothing.
        ax.set_yscale("log")
        ylabel += " (log scale)"
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30 if len(groups) < 40 else 90, ha="right",
                       fontsize=8 if len(groups) < 40 else 5)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_plots(record, rows, out_dir):
    """PNG plots for a record; returns [(file name, caption)]."""
    plt = pyplot()
    if plt is None:
        eprint("mha_bench: plots skipped: matplotlib is not installed "
               "(apt-get install python3-matplotlib)")
        return []
    machine = record["machine"]
    cpu = short_cpu(machine)
    isa = primary_isa(record, rows)
    made = []
    suites = sorted({r["suite"] for r in rows}, key=suite_rank)
    for suite in suites:
        srows = [r for r in rows if r["suite"] == suite and r["ms"] is not None and
                 (r["isa"] == isa or r["impl"] != "mha")]
        if not srows:
            continue
        metric, unit = plot_metric(srows)
        groups, series, values = [], [], {}
        for r in srows:
            if r[metric] is None:
                continue
            g = "{} {}t".format(r["config"], r["threads"])
            if g not in groups:
                groups.append(g)
            if r["impl"] not in series:
                series.append(r["impl"])
            values.setdefault((g, r["impl"]), r[metric])
        if not groups:
            continue
        series.sort(key=lambda s: (s != "mha", s))
        name = "{}_{}.png".format(metric, suite)
        bar_chart(plt, os.path.join(out_dir, name),
                  "{}: {} per shape, mha ({}) vs baselines\n{}".format(suite, unit, isa, cpu),
                  unit, groups, series, values)
        made.append((name, "{} {} per shape: mha vs baselines".format(suite, unit)))

    ours = [r for r in rows if r["impl"] == "mha" and r["isa"] == isa and r["ms"] is not None]
    thread_counts = sorted({r["threads"] for r in ours})
    if len(thread_counts) > 1:
        one = {(r["suite"], r["config"]): r["ms"] for r in ours if r["threads"] == 1}
        groups, values = [], {}
        series = ["{} threads".format(t) for t in thread_counts if t != 1]
        for r in ours:
            base = one.get((r["suite"], r["config"]))
            if r["threads"] == 1 or not base:
                continue
            g = "{}/{}".format(r["suite"], r["config"])
            if g not in groups:
                groups.append(g)
            values[(g, "{} threads".format(r["threads"]))] = base / r["ms"]
        if groups:
            peaks = machine.get("peak_gflops", {}).get(isa, {})
            top = str(thread_counts[-1])
            ref = peaks[top] / peaks["1"] if "1" in peaks and top in peaks else None
            bar_chart(plt, os.path.join(out_dir, "thread_scaling.png"),
                      "mha speedup over 1 thread ({}), {}{}".format(
                          isa, cpu, "\ndashed line: measured FMA peak ratio, {} threads vs 1"
                          .format(top) if ref else ""),
                      "speedup over 1 thread (x)", groups, series, values, ref_line=ref,
                      log_ok=False)
            made.append(("thread_scaling.png", "mha speedup over 1 thread"))

    pairs = {}
    for r in rows:
        if r["impl"] == "mha" and r["ms"] is not None and r["isa"] in ("avx2", "avx512"):
            pairs.setdefault((r["suite"], r["config"], r["threads"]), {})[r["isa"]] = r["ms"]
    both = [(k, v) for k, v in pairs.items() if len(v) == 2]
    if both:
        # A time ratio, not GFLOP/s: unit-free, so compute- and memory-bound
        # configurations share one axis.
        groups = ["{}/{} {}t".format(*k) for k, _ in both]
        values = {(g, "AVX-512 over AVX2"): v["avx2"] / v["avx512"]
                  for g, (_, v) in zip(groups, both)}
        bar_chart(plt, os.path.join(out_dir, "isa_avx2_vs_avx512.png"),
                  "mha: AVX-512 speedup over AVX2 (time AVX2 / time AVX-512)\n{}".format(cpu),
                  "speedup (x)", groups, ["AVX-512 over AVX2"], values, ref_line=1.0,
                  log_ok=False)
        made.append(("isa_avx2_vs_avx512.png", "mha AVX-512 speedup over AVX2"))
    return made


# ---------------------------------------------------------------- report


def write_report(record, out_dir, require_plots=False):
    rows = results(record)
    if not rows:
        raise UserError("{}: the record holds no benchmark results named "
                        "<suite>/<config>/<impl>/threads:<t>".format(record.get("path", "record")))
    os.makedirs(out_dir, exist_ok=True)
    text = headline_text(record, rows)
    with open(os.path.join(out_dir, "table.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    plots = write_plots(record, rows, out_dir)
    if require_plots and not plots:
        raise UserError("no plots were written (is python3-matplotlib installed?)")
    md = ["# mha benchmark report", "",
          "Record: `{}`, written {} by `{}`.".format(
              os.path.basename(record.get("path", "record.json")), record.get("created", "?"),
              record.get("command", "?")), ""]
    md += ["| machine | |", "|:---|:---|"]
    md += ["| {} | {} |".format(k, v) for k, v in machine_lines(record["machine"])]
    body = headline_body(rows)
    if body:
        md += ["", "## Results", "", markdown_table(HEADLINE_HEADERS, body, HEADLINE_ALIGNS), "",
               RATIO_NOTE]
    skipped = record.get("skipped") or []
    if skipped:
        md += ["", "Not run: " + "; ".join(skipped)]
    for name, caption in plots:
        md += ["", "## " + caption, "", "![{}]({})".format(caption, name)]
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    return text, plots


# ---------------------------------------------------------------- compare


def record_label(record):
    """CPU / ISA / file: the file's name, or folder/record.json for the record that
    'run' and 'headline' write into their --out folder (all named record.json)."""
    rows = results(record)
    path = record.get("path", "?")
    name = os.path.basename(path)
    if name == "record.json":
        name = os.path.join(os.path.basename(os.path.dirname(os.path.abspath(path))), name)
    return "{} / {} / {}".format(short_cpu(record["machine"]), primary_isa(record, rows), name)


def compare(records, impls):
    """(text, labels, keys, times) for configs common to all records, each at its primary ISA."""
    labels = [record_label(r) for r in records]
    per_record = []
    for record in records:
        rows = results(record)
        isa = primary_isa(record, rows)
        per_record.append({(r["suite"], r["config"], r["impl"], r["threads"]): r["ms"]
                           for r in rows if r["isa"] == isa and r["impl"] in impls and
                           r["ms"] is not None})
    common = [k for k in per_record[0] if all(k in m for m in per_record[1:])]
    if not common:
        sizes = ", ".join("{} has {}".format(os.path.basename(r.get("path", "?")), len(m))
                          for r, m in zip(records, per_record))
        raise UserError("no configuration (impl {}) is common to all records ({})".format(
            ",".join(impls), sizes))
    common.sort(key=lambda k: suite_rank(k[0]))
    headers = ["configuration", "impl", "thr"] + ["ms [{}]".format(chr(ord("A") + i))
                                                  for i in range(len(records))]
    headers += ["A/{}".format(chr(ord("A") + i)) for i in range(1, len(records))]
    body = []
    for k in common:
        times = [m[k] for m in per_record]
        body.append([k[0] + "/" + k[1], k[2], k[3]] + ["{:.3f}".format(t) for t in times] +
                    ["{:.2f}x".format(times[0] / t) if t > 0 else "-" for t in times[1:]])
    if len(common) > 1:
        geomeans = []
        for i in range(1, len(records)):
            logs = [math.log(per_record[0][k] / per_record[i][k]) for k in common
                    if per_record[0][k] > 0 and per_record[i][k] > 0]
            geomeans.append("{:.2f}x".format(math.exp(sum(logs) / len(logs))) if logs else "-")
        body.append(["geometric mean", "", ""] + [""] * len(records) + geomeans)
    aligns = ["<", "<", ">"] + [">"] * (2 * len(records) - 1)
    lines = ["{}: {}".format(chr(ord("A") + i), label) for i, label in enumerate(labels)]
    lines += ["", render_table(headers, body, aligns), "",
              "A/X = time in A / time in X (>1: X is faster than A)."]
    times = {k: [m[k] for m in per_record] for k in common}
    return "\n".join(lines) + "\n", labels, common, times


def compare_plot(out_dir, labels, keys, times):
    plt = pyplot()
    if plt is None:
        eprint("mha_bench: plot skipped: matplotlib is not installed "
               "(apt-get install python3-matplotlib)")
        return None
    groups = ["{}/{} {} {}t".format(*k) for k in keys]
    series = ["{}: {}".format(chr(ord("A") + i), labels[i]) for i in range(1, len(labels))]
    values = {}
    for g, k in zip(groups, keys):
        for i in range(1, len(labels)):
            values[(g, series[i - 1])] = times[k][0] / times[k][i]
    name = "compare_ratio.png"
    bar_chart(plt, os.path.join(out_dir, name),
              "speed relative to A = {} (>1: faster than A)".format(labels[0]),
              "time A / time X (x)", groups, series, values, ref_line=1.0)
    return name


def spread(records):
    """Text of the table of our rows (mha, mha_prepacked) common to all records, each record
    at its primary ISA: the median over the records of ours, oneDNN and OpenBLAS, and the
    lowest, median and highest of ours against the best baseline, one ratio per record.

    For repeated runs of one machine, where a single run's ratio moves with the noise: a
    configuration is below or above 1.0 only if it is so in every record."""
    per_record = []
    for record in records:
        rows = results(record)
        isa = primary_isa(record, rows)
        per_record.append({(r["suite"], r["config"], r["impl"], r["threads"]): r["ms"]
                           for r in rows if r["isa"] == isa and r["ms"] is not None and
                           r["impl"] in OURS + BASELINES})

    def best(times, suite, config, threads):
        found = [times[(suite, config, b, threads)] for b in BASELINES
                 if (suite, config, b, threads) in times]
        return min(found) if found else None

    keys = [k for k in per_record[0] if k[2] in OURS and
            all(k in m and best(m, k[0], k[1], k[3]) is not None for m in per_record)]
    if not keys:
        raise UserError("no configuration of ours with a baseline is common to all {} records"
                        .format(len(records)))
    first_seen = {}
    for i, k in enumerate(per_record[0]):
        first_seen.setdefault(k[:2], i)
    keys.sort(key=lambda k: (suite_rank(k[0]), first_seen[k[:2]], k[3], k[2]))

    def median_of(values):
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None

    headers = ["configuration", "thr", "ours ms", "onednn ms", "openblas ms", "ratio min",
               "median", "max", "in every record"]
    aligns = ["<", ">", ">", ">", ">", ">", ">", ">", "<"]
    body, below = [], []
    counts = {"above": 0, "below": 0, "mixed": 0}
    for suite, config, impl, threads in keys:
        ratios = [best(m, suite, config, threads) / m[(suite, config, impl, threads)]
                  for m in per_record if m[(suite, config, impl, threads)] > 0]
        label = our_label(suite, config, impl)
        verdict = ("above" if min(ratios) >= 1.0 else "below" if max(ratios) < 1.0 else "mixed")
        counts[verdict] += 1
        if verdict == "below":
            below.append("{} {}t".format(label, threads))
        base_ms = [median_of(m.get((suite, config, b, threads)) for m in per_record)
                   for b in BASELINES]
        body.append([label, threads,
                     fmt(median_of(m[(suite, config, impl, threads)] for m in per_record), ".3f")]
                    + [fmt(t, ".3f") for t in base_ms]
                    + ["{:.2f}x".format(min(ratios)), "{:.2f}x".format(median_of(ratios)),
                       "{:.2f}x".format(max(ratios)),
                       {"above": ">= 1.0", "below": "< 1.0", "mixed": "-"}[verdict]])
    lines = ["{}: {}".format(chr(ord("A") + i), record_label(r)) for i, r in enumerate(records)]
    lines += ["", render_table(headers, body, aligns), "",
              "ms = median over the {} records of each record's median; ratio = best baseline "
              "time / ours, one per record (>1: ours is faster).".format(len(records)),
              "{} configurations: {} at or above 1.0 in every record, {} below 1.0 in every "
              "record{}, {} mixed.".format(len(keys), counts["above"], counts["below"],
                                           " (" + ", ".join(below) + ")" if below else "",
                                           counts["mixed"])]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- running


def bench_command(binary, emulator):
    return (shlex.split(emulator) if emulator else []) + [binary]


def list_benchmarks(cmd, env, regex):
    proc = subprocess.run(cmd + ["--benchmark_list_tests=true", "--benchmark_filter=" + regex],
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode == SKIP_EXIT:
        return None
    if proc.returncode != 0:
        raise UserError("{} --benchmark_list_tests failed (exit {}): {}".format(
            cmd[-1], proc.returncode, last_line(proc.stderr)))
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def progress_time(line):
    """'<name> 123456 ns 120000 ns 100' (console reporter) -> '0.123 ms'."""
    parts = line.split()
    if len(parts) >= 3 and parts[2] in TIME_UNIT_MS and to_float(parts[1]) is not None:
        return "{:.3f} ms".format(to_float(parts[1]) * TIME_UNIT_MS[parts[2]])
    return " ".join(parts[1:3])


def ere_escape(text):
    """Escapes text for Google Benchmark's filter, a POSIX extended regex (no lookahead, no \\d)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def last_line(text):
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


class Runner:
    """Runs bench binaries with a progress line per benchmark, collecting their JSON."""

    def __init__(self, build, out_dir, emulator=None, timeout=600):
        self.bench_dir = os.path.join(build, "bench")
        self.out_dir = out_dir
        self.emulator = emulator
        self.timeout = timeout
        self.runs = []
        self.skipped = []
        self.step = 0
        self.dropped = set()  # environment variables the runs override, reported once
        # Where set (bundle), 1-thread runs are pinned to this CPU, so the one thread
        # stays on one core of a many-core server as the baselines' threads come and go.
        self.pin_cpu = None
        # On a shared machine the load says how far to trust the numbers.
        self.load_average = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    def binary(self, suite):
        path = os.path.join(self.bench_dir, SUITE_BINARY[suite])
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None

    def run(self, suite, regex, threads, isa=None, repetitions=1, min_time=0.5, extra=None):
        """Runs the benchmarks of `suite` whose names match the POSIX regex `regex` (and every
        Python regex in `extra`) with MHA_BENCH_THREADS=threads and MHA_ISA=isa."""
        binary = self.binary(suite)
        env = dict(os.environ, MHA_BENCH_THREADS=",".join(str(t) for t in threads))
        if isa:
            env["MHA_ISA"] = isa
        for key in BASELINE_ISA_KEYS:
            ambient = env.pop(key, None)
            if ambient is not None and key not in self.dropped:
                self.dropped.add(key)
                print("  note: {}={} from the environment is not passed on (BASELINE_ISA_ENV)"
                      .format(key, ambient), flush=True)
        env.update(BASELINE_ISA_ENV.get(isa, {}))
        # One process hosts three thread pools (oneTBB for mha, libgomp for oneDNN,
        # OpenBLAS's pthreads). Idle libgomp and OpenBLAS workers spin (OpenBLAS
        # for 2^28 cycles by default) on the cores the next benchmark needs.
        # Measured on the 2-core Xeon: oneDNN tiny_e256 at 2 threads 122 ms with
        # the defaults, 0.65 ms with these; mha decode_kv2048 at 1 thread 5.3 ms
        # vs 2.7 ms. A user's own settings win.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        env.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
        cmd = bench_command(binary, self.emulator)
        names = list_benchmarks(cmd, env, regex)
        label = "{}{}".format(SUITE_BINARY[suite], " MHA_ISA=" + isa if isa else "")
        if names is None:
            self.skipped.append("{}: ISA not supported on this CPU".format(label))
            print("  skip {}: ISA not supported here".format(label), flush=True)
            return
        extra = [e for e in (extra or []) if e]
        if extra:
            names = [n for n in names if all(re.search(e, n) for e in extra)]
            regex = "^({})$".format("|".join(ere_escape(n) for n in names))
        if not names:
            self.skipped.append("{}: no benchmark matches /{}/".format(label, regex))
            print("  skip {}: no benchmark matches /{}/".format(label, regex), flush=True)
            return
        self.step += 1
        out_json = os.path.join(self.out_dir, "gbench-{:02d}-{}{}.json".format(
            self.step, suite, "-" + isa if isa else ""))
        args = ["--benchmark_filter=" + regex, "--benchmark_out=" + out_json,
                "--benchmark_out_format=json", "--benchmark_min_time={}".format(min_time),
                "--benchmark_repetitions={}".format(repetitions), "--benchmark_color=false",
                "--benchmark_counters_tabular=false"]
        if repetitions > 1:
            args.append("--benchmark_display_aggregates_only=true")
        print("{} ({} benchmarks)".format(label, len(names)), flush=True)
        # stderr to a file, not a pipe: nobody reads a pipe while stdout streams,
        # so a chatty binary could fill it and block.
        err_path = out_json + ".stderr"
        err_file = open(err_path, "w+", encoding="utf-8", errors="replace")
        proc = subprocess.Popen(cmd + args, env=env, stdout=subprocess.PIPE, stderr=err_file,
                                text=True, preexec_fn=self.pinning(threads))
        # A watchdog, since reading stdout blocks until the binary exits (or hangs:
        # under qemu-user a second guest thread hangs).
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            proc.kill()

        watchdog = threading.Timer(self.timeout, kill)
        watchdog.start()
        done = 0
        wanted = set(names)
        try:
            for line in proc.stdout:
                first = line.split(" ", 1)[0]
                if repetitions > 1:
                    if not first.endswith("_median"):
                        continue
                    first = first[:-len("_median")]
                if first in wanted:
                    done += 1
                    print("  [{}/{}] {}  {}".format(done, len(names), first,
                                                    progress_time(line)), flush=True)
            proc.wait()
        finally:
            watchdog.cancel()
            proc.stdout.close()
            err_file.seek(0)
            stderr = err_file.read()
            err_file.close()
            os.remove(err_path)
        if timed_out.is_set():
            raise UserError("{} timed out after {} s".format(label, self.timeout))
        if proc.returncode != 0:
            raise UserError("{} failed (exit {}): {}".format(label, proc.returncode,
                                                            last_line(stderr)))
        try:
            with open(out_json, encoding="utf-8") as f:
                gbench = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise UserError("{}: no usable JSON output ({})".format(label, e))
        os.remove(out_json)
        self.runs.append(dict({"binary": SUITE_BINARY[suite], "suite": suite,
                               "env": {k: env[k] for k in RECORDED_ENV if k in env},
                               "args": args, "gbench": gbench}, **self.pinned(threads)))

    def pinning(self, threads):
        """The preexec_fn that pins a run at `threads` (None: not pinned)."""
        if self.pin_cpu is None or list(threads) != [1]:
            return None
        cpu = self.pin_cpu
        return lambda: os.sched_setaffinity(0, {cpu})

    def pinned(self, threads):
        """The run entry's record of its pinning."""
        return {"cpu_affinity": [self.pin_cpu]} if self.pinning(threads) else {}


def attention_shapes(runs):
    """{threads: [name:E:H:batch:q_len:kv_len:causal:kv_heads:decode, ...]}: the configs our
    attention rows ran at each thread count (from the shape in each row's label), in order."""
    shapes = {}
    for run in runs:
        if run.get("suite") != "attention" or run["env"].get("MHA_ISA"):
            continue
        for b in run["gbench"].get("benchmarks", []):
            parsed = parse_name(b.get("run_name", b.get("name", "")))
            m = SHAPE_RE.match(b.get("label", ""))
            if not parsed or parsed[2] != "mha" or not m:
                continue
            spec = "{}:{}:{}:{}:{}:{}:{}:{}:{}".format(
                parsed[1], m.group("E"), m.group("H"), m.group("B"), m.group("Sq"),
                m.group("Skv"), 1 if m.group("causal") else 0, m.group("KV") or 0,
                1 if m.group("decode") else 0)
            if spec not in shapes.setdefault(parsed[3], []):
                shapes[parsed[3]].append(spec)
    return shapes


GEMM_SHAPES = (  # bench_gemm's shape names -> name:M:N:K:trans_b for torch_mha.py --gemm
    (re.compile(r"sq(\d+)"), lambda n: (n, n, n, 0)),
    (re.compile(r"proj_m(\d+)_n(\d+)_k(\d+)_nt"), lambda m, n, k: (m, n, k, 1)),
    (re.compile(r"qk_s(\d+)"), lambda s: (s, s, 64, 1)),
    (re.compile(r"pv_s(\d+)"), lambda s: (s, 64, s, 0)),
    (re.compile(r"gemv_n(\d+)"), lambda n: (1, n, 768, 1)),
)


def gemm_shapes(runs):
    """{threads: [name:M:N:K:trans_b, ...]}: the GEMM shapes our rows ran (fp32 or bf16_)."""
    shapes = {}
    for run in runs:
        if run.get("suite") != "gemm" or run["env"].get("MHA_ISA"):
            continue
        for b in run["gbench"].get("benchmarks", []):
            parsed = parse_name(b.get("run_name", b.get("name", "")))
            if not parsed or parsed[2] != "mha":
                continue
            config = parsed[1][len("bf16_"):] if parsed[1].startswith("bf16_") else parsed[1]
            for pattern, dims in GEMM_SHAPES:
                m = pattern.fullmatch(config)
                if m:
                    spec = ":".join([config] + [str(d) for d in dims(*map(int, m.groups()))])
                    if spec not in shapes.setdefault(parsed[3], []):
                        shapes[parsed[3]].append(spec)
    return shapes


def torch_python(python=None):
    """A python3 that imports torch (`python`, else this one or Debian's /usr/bin/python3),
    or None."""
    candidates = [python] if python else [sys.executable, "/usr/bin/python3"]
    for python in dict.fromkeys(candidates):
        if python and subprocess.run([python, "-c", "import torch"],
                                     capture_output=True).returncode == 0:
            return python
    return None


def run_pytorch(runner, repetitions, min_time, python=None, gemm=False):
    """PyTorch in fp32 and bf16 on the attention configs that ran (and, with `gemm`, the GEMM
    shapes), at their thread counts, as more runs of the record; says so when torch is
    missing."""
    shapes = attention_shapes(runner.runs)
    gemms = gemm_shapes(runner.runs) if gemm else {}
    if not shapes and not gemms:
        return
    found = torch_python(python)
    if found is None:
        msg = ("pytorch: no PyTorch rows, {} cannot import torch".format(python) if python else
               "pytorch: no PyTorch rows, python3-torch is not installed "
               "(apt-get install python3-torch adds them)")
        runner.skipped.append(msg)
        print(msg, flush=True)
        return
    isa = next((r["gbench"].get("context", {}).get("mha_isa") for r in runner.runs
                if r.get("suite") in ("attention", "gemm") and not r["env"].get("MHA_ISA")), None)
    for t in sorted(set(shapes) | set(gemms)):
        configs = shapes.get(t, [])
        runner.step += 1
        out_json = os.path.join(runner.out_dir, "gbench-{:02d}-pytorch.json".format(runner.step))
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t))
        args = ["--threads", str(t), "--repetitions", str(repetitions), "--min-time",
                str(min_time), "--out", out_json] + configs
        for spec in gemms.get(t, []):
            args += ["--gemm", spec]
        print("torch_mha.py ({} configs{} x fp32, bf16, {} thread{})".format(
            len(configs), " + {} GEMM shapes".format(len(gemms[t])) if gemms.get(t) else "", t,
            "" if t == 1 else "s"), flush=True)
        proc = subprocess.run([found, TORCH_SCRIPT] + args, env=env, stderr=subprocess.PIPE,
                              text=True, timeout=runner.timeout,
                              preexec_fn=runner.pinning([t]))
        if proc.returncode != 0:
            raise UserError("torch_mha.py failed (exit {}): {}".format(
                proc.returncode, last_line(proc.stderr)))
        with open(out_json, encoding="utf-8") as f:
            gbench = json.load(f)
        os.remove(out_json)
        gbench["context"]["mha_isa"] = isa  # so the rows pair with ours
        runner.runs.append(dict({"binary": "torch_mha.py", "suite": "pytorch",
                                 "env": {k: env[k] for k in RECORDED_ENV if k in env},
                                 "args": args, "gbench": gbench}, **runner.pinned([t])))


def threads_run(runs):
    """Thread counts that appear in the benchmark names of the runs."""
    seen = set()
    for run in runs:
        for b in run["gbench"].get("benchmarks", []):
            parsed = parse_name(b.get("run_name", b.get("name", "")))
            if parsed:
                seen.add(parsed[3])
    return sorted(seen)


def write_record(runner, command, threads, out_dir):
    if not runner.runs:
        raise UserError("nothing ran" + (": " + "; ".join(runner.skipped)
                                         if runner.skipped else ""))
    record = {
        "format": RECORD_FORMAT,
        "format_version": RECORD_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "machine": dict(machine_section(runner.runs, threads_run(runner.runs) or threads),
                        emulator=runner.emulator, load_average_1m=runner.load_average),
        "skipped": runner.skipped,
        "runs": runner.runs,
    }
    path = os.path.join(out_dir, "record.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    record["path"] = path
    return record


def parse_threads(text):
    try:
        threads = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        threads = []
    if not threads or any(t < 1 for t in threads):
        raise UserError("--threads: expected a comma-separated list of positive counts, "
                        "got '{}'".format(text))
    return sorted(set(threads))


def existing_suites(runner, suites, required):
    present, missing = [], []
    for s in suites:
        (present if runner.binary(s) else missing).append(s)
    for s in missing:
        msg = "{} not found in {}".format(SUITE_BINARY[s], runner.bench_dir)
        if required:
            raise UserError(msg + " (build it: cmake --build BUILD --target {})".format(
                SUITE_BINARY[s]))
        print("missing: " + msg, flush=True)
        runner.skipped.append(msg)
    if not present:
        raise UserError("no bench binaries in {} (build with -DMHA_BUILD_BENCH=ON: bench_gemm, "
                        "bench_softmax, bench_attention)".format(runner.bench_dir))
    return present


def finish(runner, command, threads, out_dir, require_plots=False):
    record = write_record(runner, command, threads, out_dir)
    text, plots = write_report(record, out_dir, require_plots)
    print()
    print(text, end="")
    print("\nrecord: {}\nreport: {}{}".format(
        record["path"], os.path.join(out_dir, "report.md"),
        "".join("\nplot:   " + os.path.join(out_dir, p) for p, _ in plots)))
    return record


def first_config(names, suite_prefix, prefer):
    """The config, among listed names of one suite, matching the first preferred pattern."""
    configs = []
    for n in names:
        parsed = parse_name(n)
        if parsed and parsed[0] == suite_prefix and parsed[1] not in configs:
            configs.append(parsed[1])
    for pattern in prefer:
        for c in configs:
            if re.fullmatch(pattern, c):
                return c
    return configs[0] if configs else None


def cmd_headline(args):
    out = args.out
    os.makedirs(out, exist_ok=True)
    runner = Runner(args.build, out, args.emulator)
    suites = existing_suites(runner, ["gemm", "softmax", "attention"], required=False)
    reps, min_time = args.repetitions, args.min_time
    print("headline benchmark: repetitions {}, min_time {} s, output in {}".format(
        reps, min_time, out), flush=True)
    if "gemm" in suites:
        shapes = "sq1024|proj_m512_n2304_k768_nt|gemv_n2304"
        runner.run("gemm", r"^gemm/({})/[^/]+/threads:1(/|$)".format(shapes), [1],
                   repetitions=reps, min_time=min_time)
    if "softmax" in suites:
        cmd = bench_command(runner.binary("softmax"), args.emulator)
        names = list_benchmarks(cmd, dict(os.environ, MHA_BENCH_THREADS="1"), "^softmax/") or []
        # The attention-shaped rows of a 1024-token sequence (bench_softmax names
        # softmax/h12_q<Q>_k<K>); whatever comes first if the names change.
        config = first_config(names, "softmax", [r"h12_q256_k1024", r".*_k1024", r".*1024.*"])
        if config:
            runner.run("softmax", r"^softmax/{}/[^/]+/threads:1(/|$)".format(ere_escape(config)),
                       [1], repetitions=reps, min_time=min_time)
    if "attention" in suites:
        one = "bert_b1_s128|bert_b1_s512|gpt2_causal_s1024|tiny[^/]*|decode_kv2048"
        two = "bert_b1_s128|tiny[^/]*|decode_kv2048"  # cheap enough to add 2 threads
        runner.run("attention", r"^attention/(({})/[^/]+/threads:1|({})/[^/]+/threads:2)(/|$)"
                   .format(one, two), [1, 2], repetitions=reps, min_time=min_time)
        run_pytorch(runner, reps, min_time, args.python)
    # AVX2 next to AVX-512 for two shapes, when both run here, with the baselines
    # capped to AVX2 as well (BASELINE_ISA_ENV).
    available = []
    if runner.runs:
        ctx = runner.runs[0]["gbench"].get("context", {})
        available = ctx.get("mha_isas_available", "").split(",")
        if "avx2" in available and ctx.get("mha_isa") != "avx2":
            if "gemm" in suites:
                runner.run("gemm", r"^gemm/sq1024/[^/]+/threads:1(/|$)", [1], isa="avx2",
                           repetitions=reps, min_time=min_time)
            if "attention" in suites:
                runner.run("attention", r"^attention/bert_b1_s128/[^/]+/threads:1(/|$)", [1],
                           isa="avx2", repetitions=reps, min_time=min_time)
    finish(runner, "headline", [1, 2], out)


def cmd_run(args):
    threads = parse_threads(args.threads)
    isas = [None] if not args.isa else [i.strip() for i in args.isa.split(",") if i.strip()]
    unknown = [i for i in isas if i is not None and i not in ISAS]
    if unknown:
        raise UserError("--isa: unknown ISA '{}' (expected a comma-separated list of {})".format(
            unknown[0], ", ".join(ISAS)))
    try:
        re.compile(args.filter)
    except re.error as e:
        raise UserError("--filter: not a valid regex: {}".format(e))
    suites = list(SUITE_BINARY) if args.suite == "all" else [args.suite]
    out = args.out
    os.makedirs(out, exist_ok=True)
    runner = Runner(args.build, out, args.emulator, timeout=args.timeout)
    suites = existing_suites(runner, suites, required=args.suite != "all")
    t_re = "|".join(str(t) for t in threads)
    for suite in suites:
        prefixes = "|".join(SUITE_PREFIXES[suite])
        for isa in isas:
            # Baselines run at every ISA of the sweep, capped to it (BASELINE_ISA_ENV).
            regex = r"^({})/.*/threads:({})(/|$)".format(prefixes, t_re)
            runner.run(suite, regex, threads, isa=isa, repetitions=args.repetitions,
                       min_time=args.min_time, extra=[args.filter])
    if "attention" in suites and not args.no_pytorch:
        run_pytorch(runner, args.repetitions, args.min_time, args.python)
    finish(runner, "run", threads, out)


def cmd_smoke(args):
    out = args.out
    os.makedirs(out, exist_ok=True)
    runner = Runner(args.build, out, args.emulator)
    suites = existing_suites(runner, ["gemm", "softmax", "attention"], required=False)
    for suite in suites:
        cmd = bench_command(runner.binary(suite), args.emulator)
        names = list_benchmarks(cmd, dict(os.environ, MHA_BENCH_THREADS="1"), ".") or []
        for prefix in SUITE_PREFIXES[suite]:
            config = first_config(names, prefix, [])
            if config:
                runner.run(suite, r"^{}/{}/[^/]+/threads:1(/|$)".format(prefix, ere_escape(config)),
                           [1], repetitions=1, min_time=0.01)
    record = finish(runner, "smoke", [1], out, require_plots=True)
    # Round trip: the written record must load and report again.
    write_report(load_record(record["path"]), out, require_plots=True)
    print("smoke: OK")


# The bundle preset: the key rows, sized to finish in under 5 minutes on a 16-core Xeon
# (issue 27) at 3 repetitions of 0.05 s. bert_b1_s2048 runs at the top thread count only.
BUNDLE_ATTENTION = ("bert_b1_s128|bert_b1_s512|gpt2_causal_s1024|llama1b_gqa_causal_s1024|"
                    "llama1b_decode_b1_kv4096|llama1b_decode_b16_kv2048")
BUNDLE_ATTENTION_TOP = "bert_b1_s2048"
BUNDLE_GEMM = "sq1024|proj_m512_n2304_k768_nt|proj_m4096_n768_k768_nt"


def cmd_bundle(args):
    if args.threads:
        threads = parse_threads(args.threads)
    else:
        threads = sorted({1, physical_cores() or len(os.sched_getaffinity(0))})
    out = args.out
    os.makedirs(out, exist_ok=True)
    runner = Runner(args.build, out, args.emulator, timeout=args.timeout)
    runner.pin_cpu = min(os.sched_getaffinity(0))
    suites = existing_suites(runner, ["gemm", "attention"], required=True)
    print("bundle preset: threads {}, repetitions {}, min_time {} s, output in {}".format(
        ",".join(map(str, threads)), args.repetitions, args.min_time, out), flush=True)
    for t in threads:
        # One process per thread count, so the 1-thread one can be pinned.
        configs = BUNDLE_ATTENTION + ("|" + BUNDLE_ATTENTION_TOP if t == threads[-1] else "")
        for suite, regex in (
                ("gemm", r"^gemm/(bf16_)?({})/(mha|mha_prepacked)/threads:{}(/|$)".format(
                    BUNDLE_GEMM, t)),
                ("attention", r"^attention/({})/(mha|mha_bf16)/threads:{}(/|$)".format(
                    configs, t))):
            if suite in suites:
                runner.run(suite, regex, [t], repetitions=args.repetitions,
                           min_time=args.min_time)
    if not args.no_pytorch:
        # On a borrowed server the record of ours is worth keeping when torch fails.
        try:
            run_pytorch(runner, args.repetitions, args.min_time, args.python, gemm=True)
        except (UserError, OSError, subprocess.SubprocessError) as e:
            runner.skipped.append("pytorch: {}".format(e))
            print("pytorch: {}".format(e), flush=True)
    finish(runner, "bundle", threads, out)


CROSSCPU_ROWS = (("attention", "bert_b1_s128", 1), ("attention", "bert_b1_s512", 1),
                 ("attention", "gpt2_causal_s1024", 1), ("attention", "bert_b1_s2048", 1),
                 ("attention", "decode_kv2048", 1), ("attention", "bert_b1_s128", 16),
                 ("attention", "llama1b_gqa_causal_s1024", 1),
                 ("attention", "llama1b_decode_b16_kv2048", 16), ("gemm", "sq1024", 1),
                 ("gemm", "sq1024", 16))


def crosscpu(records):
    """Markdown table of ours (fp32 / bf16 ms, and the fp32 ratio to the best baseline) on
    CROSSCPU_ROWS, one column per record at its primary ISA; rows no record has are left out."""
    columns = []
    for record in records:
        rows = results(record)
        isa = primary_isa(record, rows)
        primary = [r for r in rows if r["isa"] == isa]
        columns.append(({(r["suite"], r["config"], r["impl"], r["threads"]): r
                         for r in primary if r["ms"] is not None}, primary))

    def cell(column, suite, config, threads):
        ours, rows = column
        fp32 = ours.get((suite, config, "mha", threads))
        bf16 = ours.get((suite, config, "mha_bf16", threads) if suite == "attention" else
                        (suite, "bf16_" + config, "mha", threads))
        if not fp32 and not bf16:
            return None
        base = best_baseline(rows, fp32) if fp32 else None
        return "{} / {}{}".format(fmt(fp32 and fp32["ms"], ".3f"), fmt(bf16 and bf16["ms"], ".3f"),
                                  " ({:.2f}x {})".format(base["ms"] / fp32["ms"], base["impl"])
                                  if base and base["impl"] not in REFERENCES else "")

    headers = ["configuration", "thr"] + [r.get("label") or short_cpu(r["machine"])
                                          for r in records]
    body = []
    for suite, config, threads in CROSSCPU_ROWS:
        cells = [cell(column, suite, config, threads) for column in columns]
        if any(cells):
            body.append(["{}/{}".format(suite, config), threads] + [c or "-" for c in cells])
    if not body:
        raise UserError("none of the key rows is in these records")
    return (markdown_table(headers, body, ["<", ">"] + ["<"] * len(records)) + "\n\n" +
            "Cells: ours fp32 ms / bf16 ms (ratio = best baseline time / ours fp32, with that "
            "baseline), each record at its primary ISA. Records: {}.\n".format(
                "; ".join("{}: {}".format(h, r.get("path", "?"))
                          for h, r in zip(headers[2:], records))))


def load_merged(spec):
    """[LABEL=]A+B+...: records of one machine (e.g. its attention and GEMM runs) as one,
    labelled LABEL (default: its CPU model)."""
    label, _, paths = spec.rpartition("=")
    parts = [load_record(p) for p in paths.split("+")]
    return dict(parts[0], runs=[run for r in parts for run in r["runs"]], label=label or None,
                path=paths)


def cmd_crosscpu(args):
    print(crosscpu([load_merged(p) for p in args.records]), end="")


def cmd_report(args):
    record = load_record(args.record)
    out = args.out or os.path.dirname(os.path.abspath(args.record))
    text, plots = write_report(record, out)
    print(text, end="")
    print("\nreport: {}{}".format(os.path.join(out, "report.md"),
                                   "".join("\nplot:   " + os.path.join(out, p)
                                           for p, _ in plots)))


def cmd_compare(args):
    if len(args.records) < 2:
        raise UserError("compare needs at least two records")
    records = [load_record(p) for p in args.records]
    impls = [i.strip() for i in args.impl.split(",") if i.strip()]
    text, labels, keys, times = compare(records, impls)
    print(text, end="")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "compare.txt"), "w", encoding="utf-8") as f:
            f.write(text)
        plot = compare_plot(args.out, labels, keys, times)
        if plot:
            print("plot: " + os.path.join(args.out, plot))


def cmd_spread(args):
    if len(args.records) < 2:
        raise UserError("spread needs at least two records")
    text = spread([load_record(p) for p in args.records])
    print(text, end="")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "spread.txt"), "w", encoding="utf-8") as f:
            f.write(text)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UserError(message)


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, got '{}'".format(text))
    return value


def main(argv=None):
    parser = Parser(prog="mha_bench.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def add_build(p):
        p.add_argument("--build", required=True, help="CMake build dir (binaries in DIR/bench)")
        p.add_argument("--emulator", default=os.environ.get("MHA_BENCH_EMULATOR"),
                       help="command prefix for cross-built binaries, e.g. "
                            "'qemu-aarch64 -L /usr/aarch64-linux-gnu' (timing then means nothing)")

    p = sub.add_parser("headline", help="~2 minute headline benchmark")
    add_build(p)
    p.add_argument("--out", default="mha-bench-headline", help="output directory")
    # Median of 5 short repetitions: on a shared machine a single long run
    # absorbs every disturbance, a median of short ones mostly dodges them.
    p.add_argument("--repetitions", type=positive_int, default=5)
    p.add_argument("--min-time", type=float, default=0.1, help="seconds per repetition")
    p.add_argument("--python", help="python3 with torch for the PyTorch rows (default: this "
                   "one or /usr/bin/python3)")
    p.set_defaults(fn=cmd_headline)

    p = sub.add_parser("run", help="full suite with options")
    add_build(p)
    p.add_argument("--suite", choices=["gemm", "softmax", "attention", "all"], default="all")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--isa", default="", help="MHA_ISA sweep, e.g. avx2,avx512 (default: auto)")
    p.add_argument("--repetitions", type=positive_int, default=3)
    p.add_argument("--min-time", type=float, default=0.5, help="seconds per repetition")
    p.add_argument("--filter", default="", help="extra (Python) regex the names must match")
    p.add_argument("--timeout", type=positive_int, default=3600, help="seconds per binary run")
    p.add_argument("--no-pytorch", action="store_true",
                   help="leave out the PyTorch rows (timed where python3-torch is installed)")
    p.add_argument("--python", help="python3 with torch for the PyTorch rows (default: this "
                   "one or /usr/bin/python3)")
    p.add_argument("--out", default="mha-bench-run", help="output directory")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("report", help="table, plots and report.md from a record")
    p.add_argument("record")
    p.add_argument("--out", help="output directory (default: the record's)")
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("compare", help="side-by-side ratios of two or more records")
    p.add_argument("records", nargs="+")
    p.add_argument("--impl", default="mha", help="implementations to compare (default mha)")
    p.add_argument("--out", help="directory for compare.txt and compare_ratio.png")
    p.set_defaults(fn=cmd_compare)

    p = sub.add_parser("spread", help="ours vs baselines over repeated runs: ratio min/median/max")
    p.add_argument("records", nargs="+")
    p.add_argument("--out", help="directory for spread.txt")
    p.set_defaults(fn=cmd_spread)

    p = sub.add_parser("bundle", help="the key rows, ours and PyTorch, in minutes")
    add_build(p)
    p.add_argument("--threads", default="", help="comma-separated thread counts "
                   "(default: 1 and the physical cores)")
    p.add_argument("--repetitions", type=positive_int, default=3)
    p.add_argument("--min-time", type=float, default=0.05, help="seconds per repetition")
    p.add_argument("--timeout", type=positive_int, default=600, help="seconds per binary run")
    p.add_argument("--python", help="python3 with torch for the PyTorch rows (default: this "
                   "one or /usr/bin/python3)")
    p.add_argument("--no-pytorch", action="store_true", help="leave out the PyTorch rows")
    p.add_argument("--out", default="mha-bench-bundle", help="output directory")
    p.set_defaults(fn=cmd_bundle)

    p = sub.add_parser("crosscpu", help="ours on the key rows, one column per record")
    p.add_argument("records", nargs="+", help="records, or A.json+B.json for one machine's "
                   "records in one column")
    p.set_defaults(fn=cmd_crosscpu)

    p = sub.add_parser("smoke", help="tiny end-to-end run for CI")
    add_build(p)
    p.add_argument("--out", default="mha-bench-smoke", help="output directory")
    p.set_defaults(fn=cmd_smoke)

    try:
        args = parser.parse_args(argv)
        args.fn(args)
    except UserError as e:
        eprint("mha_bench: error: {}".format(e))
        return 2
    except KeyboardInterrupt:
        eprint("mha_bench: interrupted")
        return 130
    except OSError as e:
        eprint("mha_bench: error: {}".format(e))
        return 2
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        # A record that passed load_record's checks but holds a field of the wrong
        # type somewhere deeper: still one line, naming what was wrong.
        eprint("mha_bench: error: malformed input ({}: {})".format(type(e).__name__, e))
        return 2
    return 0


def reexec_for_matplotlib():
    """Debian's python3-matplotlib lives in /usr/bin/python3's site-packages; when this
    runs under another python3 found first on PATH (pyenv, a venv) that lacks it, run
    under Debian's instead, so `python3 mha_bench.py` still draws the plots."""
    import importlib.util
    system = "/usr/bin/python3"
    if importlib.util.find_spec("matplotlib") is not None or os.environ.get("MHA_BENCH_REEXEC"):
        return
    if not os.path.exists(system) or os.path.realpath(sys.executable) == os.path.realpath(system):
        return
    probe = subprocess.run([system, "-c", "import matplotlib"], capture_output=True)
    if probe.returncode == 0:
        os.environ["MHA_BENCH_REEXEC"] = "1"
        os.execv(system, [system, os.path.abspath(__file__)] + sys.argv[1:])


if __name__ == "__main__":
    reexec_for_matplotlib()
    sys.exit(main())
