"""Tests of mha_bench.py on small fixture records and a fake bench binary.

Run: python3 -m unittest test_mha_bench (from bench/report), or ctest -R report/."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
TOOL = os.path.join(HERE, "mha_bench.py")
sys.path.insert(0, HERE)
import mha_bench  # noqa: E402

try:
    import matplotlib  # noqa: F401
    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False


def fixture(name):
    return os.path.join(FIXTURES, name)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def run_main(*argv):
    """mha_bench.main in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = mha_bench.main(list(argv))
    return status, out.getvalue(), err.getvalue()


def run_tool(*argv):
    """The tool as a user runs it, in its own interpreter (so a traceback would show)."""
    return subprocess.run([sys.executable, TOOL] + list(argv), capture_output=True, text=True,
                          timeout=300)


@contextlib.contextmanager
def ambient_env(key, value):
    """os.environ[key] = value for the block, then as it was."""
    before = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[key]
        else:
            os.environ[key] = before


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mha_bench_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def fake_build(self, suites):
        """A build dir whose bench/bench_<suite> are the fake binary."""
        build = os.path.join(self.tmp, "build")
        os.makedirs(os.path.join(build, "bench"))
        for suite in suites:
            path = os.path.join(build, "bench", "bench_" + suite)
            with open(path, "w", encoding="utf-8") as f:
                f.write("#!{}\n".format(sys.executable) + read(fixture("fake_bench.py")))
            os.chmod(path, 0o755)
        return build


class ResultsTest(unittest.TestCase):
    def setUp(self):
        self.record = mha_bench.load_record(fixture("record_a.json"))
        self.rows = {(r["suite"], r["config"], r["impl"], r["threads"], r["isa"]): r
                     for r in mha_bench.results(self.record)}

    def test_median_of_repetitions_is_used(self):
        # The fixture's repetitions are 1.02x, 0.99x and 1.00x of 16 ms; its median aggregate 16.
        row = self.rows[("gemm", "sq1024", "mha", 1, "avx512")]
        self.assertAlmostEqual(row["ms"], 16.0)
        self.assertAlmostEqual(row["cv_pct"], 1.5)

    def test_single_iteration_entries_are_read(self):
        row = self.rows[("attention", "bert_b1_s128", "mha", 1, "avx512")]
        self.assertAlmostEqual(row["ms"], 30.0)
        self.assertAlmostEqual(row["gflops"], 96.0)

    def test_isa_comes_from_each_run_context(self):
        self.assertIn(("gemm", "sq1024", "mha", 1, "avx2"), self.rows)

    def test_error_runs_are_kept_with_their_message(self):
        row = self.rows[("gemm", "sq64", "mha", 1, "avx512")]
        self.assertIsNone(row["ms"])
        self.assertEqual(row["error"], "mha::sgemm failed")

    def test_names_outside_the_contract_are_ignored(self):
        self.assertFalse(any(k[0] == "not_a_contract_name" for k in self.rows))

    def test_parse_name(self):
        self.assertEqual(mha_bench.parse_name("attention/bert_b1_s128/onednn/threads:16/real_time"),
                         ("attention", "bert_b1_s128", "onednn", 16))
        self.assertEqual(mha_bench.parse_name("softmax/rows/1024/mha/threads:2"),
                         ("softmax", "rows/1024", "mha", 2))
        self.assertIsNone(mha_bench.parse_name("BM_foo/1024"))

    def test_best_baseline_is_the_faster_of_onednn_and_openblas(self):
        rows = mha_bench.results(self.record)
        ours = self.rows[("gemm", "sq1024", "mha", 1, "avx512")]
        self.assertEqual(mha_bench.best_baseline(rows, ours)["impl"], "onednn")
        ours2 = self.rows[("gemm", "sq1024", "mha", 2, "avx512")]
        self.assertEqual(mha_bench.best_baseline(rows, ours2)["impl"], "openblas")
        decode = self.rows[("attention", "decode_kv2048", "mha", 1, "avx512")]
        self.assertEqual(mha_bench.best_baseline(rows, decode)["impl"], "memcpy")

    def test_bf16_rows_name_their_kernel_set(self):
        def bench(impl, ms):
            name = "attention/bert_b1_s128/{}/threads:1/real_time".format(impl)
            return {"name": name, "run_name": name, "run_type": "iteration",
                    "real_time": ms * 1e6, "time_unit": "ns"}
        context = {"mha_isa": "avx512", "mha_bf16_kernel": "amx_bf16"}
        record = {"runs": [{"gbench": {"context": context, "benchmarks": [
            bench("mha", 4.0), bench("mha_bf16", 2.0), bench("onednn", 5.0)]}}]}
        rows = mha_bench.results(record)
        shown = {r[0]: r[2] for r in mha_bench.headline_body(rows)}
        self.assertEqual(shown, {"attention/bert_b1_s128": "avx512",
                                 "attention/bert_b1_s128 bf16": "amx_bf16"})
        # Matched to baselines by ISA, as before.
        bf16 = [r for r in rows if r["impl"] == "mha_bf16"][0]
        self.assertEqual(mha_bench.best_baseline(rows, bf16)["impl"], "onednn")

    def test_prepacked_rows_are_listed_after_mha_with_their_ratio(self):
        def row(impl, ms):
            return {"suite": "gemm", "config": "proj_m128_n768_k768_nt", "impl": impl,
                    "threads": 1, "isa": "avx512", "ms": ms, "gflops": None, "peak_pct": None,
                    "gbps": None, "error": None}
        body = mha_bench.headline_body([row("onednn", 1.0), row("mha_prepacked", 0.8),
                                        row("mha", 1.25)])
        self.assertEqual([(r[0], r[-1]) for r in body],
                         [("gemm/proj_m128_n768_k768_nt", "0.80x"),
                          ("gemm/proj_m128_n768_k768_nt prepacked", "1.25x")])

    def test_bf16_rows_are_measured_against_bf16_baselines_too(self):
        def row(config, impl, ms):
            return {"suite": "attention", "config": config, "impl": impl, "threads": 1,
                    "isa": "avx512", "ms": ms, "gflops": None, "peak_pct": None, "gbps": None,
                    "error": None}
        rows = [row("bert", "onednn", 2.0), row("bert", "onednn_bf16", 1.0),
                row("bert", "pytorch", 1.5), row("bert", "pytorch_bf16", 1.2),
                row("bert", "mha", 1.8), row("bert", "mha_bf16", 0.9)]
        self.assertEqual(mha_bench.best_baseline(rows, rows[5])["impl"], "onednn_bf16")
        # An fp32 row of ours is held to fp32 baselines only, PyTorch's among them.
        self.assertEqual(mha_bench.best_baseline(rows, rows[4])["impl"], "pytorch")
        body = mha_bench.pytorch_body(rows, "avx512")
        self.assertEqual(body, [["bert", 1, "1.800", "1.500", "0.83x", "0.900", "1.200",
                                 "1.33x"]])

    def test_pytorch_table_compares_with_the_primary_isa_rows(self):
        # Zen 4, BERT s128 at 1 thread: the AVX2 sweep's rows (7.753, 7.746) came after the
        # default ones (6.667, 3.975) and had replaced them in the PyTorch table.
        def row(impl, ms, isa="avx512", suite="attention", config="bert_b1_s128"):
            return {"suite": suite, "config": config, "impl": impl, "threads": 1, "isa": isa,
                    "ms": ms, "gflops": None, "peak_pct": None, "gbps": None, "error": None}
        rows = [row("mha", 6.667), row("mha_bf16", 3.975), row("pytorch", 4.0),
                row("pytorch_bf16", 4.4), row("mha", 7.753, "avx2"), row("mha_bf16", 7.746, "avx2"),
                row("mha", 10.0, suite="gemm", config="sq1024"),
                row("mha", 5.0, suite="gemm", config="bf16_sq1024"),
                row("pytorch", 9.0, suite="gemm", config="sq1024"),
                row("pytorch", 2.5, suite="gemm", config="bf16_sq1024"),
                row("mha", 20.0, "avx2", suite="gemm", config="sq1024")]
        record = {"machine": {"isa_chosen": "avx512"}, "runs": []}
        self.assertEqual(mha_bench.pytorch_body(rows, mha_bench.primary_isa(record, rows)),
                         [["bert_b1_s128", 1, "6.667", "4.000", "0.60x", "3.975", "4.400",
                           "1.11x"],
                          ["gemm/sq1024", 1, "10.000", "9.000", "0.90x", "5.000", "2.500",
                           "0.50x"]])

    def test_pytorch_shapes_come_from_our_attention_rows_labels(self):
        def bench(name, label):
            return {"name": name, "run_name": name, "label": label}
        runs = [{"suite": "attention", "env": {}, "gbench": {"benchmarks": [
            bench("attention/bert/mha/threads:1/real_time", "E768 H12 B1 Sq128 Skv128"),
            bench("attention/bert/onednn/threads:1/real_time", "E768 H12 B1 Sq128 Skv128"),
            bench("attention/gpt2/mha/threads:2/real_time", "E768 H12 B1 Sq64 Skv64 causal"),
            bench("attention/dec/mha/threads:1/real_time", "E768 H12 B1 Sq1 Skv64 decode"),
            bench("attention/old/mha/threads:1/real_time", "")]}},
            {"suite": "attention", "env": {"MHA_ISA": "avx2"}, "gbench": {"benchmarks": [
                bench("attention/x/mha/threads:1/real_time", "E8 H2 B1 Sq4 Skv4")]}}]
        self.assertEqual(mha_bench.attention_shapes(runs),
                         {1: ["bert:768:12:1:128:128:0:0:0", "dec:768:12:1:1:64:0:0:1"],
                          2: ["gpt2:768:12:1:64:64:1:0:0"]})

    def test_gqa_shapes_and_gemm_shapes_for_pytorch(self):
        def bench(name, label=""):
            return {"name": name, "run_name": name, "label": label}
        runs = [{"suite": "attention", "env": {}, "gbench": {"benchmarks": [
            bench("attention/llama/mha/threads:16/real_time",
                  "E2048 H32 KV8 B16 Sq1 Skv2048 decode")]}},
                {"suite": "gemm", "env": {}, "gbench": {"benchmarks": [
                    bench("gemm/sq1024/mha/threads:1/real_time"),
                    bench("gemm/bf16_proj_m512_n2304_k768_nt/mha/threads:1/real_time"),
                    bench("gemm/sq1024/onednn/threads:1/real_time")]}}]
        self.assertEqual(mha_bench.attention_shapes(runs),
                         {16: ["llama:2048:32:16:1:2048:0:8:1"]})
        self.assertEqual(mha_bench.gemm_shapes(runs),
                         {1: ["sq1024:1024:1024:1024:0", "proj_m512_n2304_k768_nt:512:2304:768:1"]})

    def test_torch_mha_without_torch_exits_3(self):
        # -S: no site-packages, so no torch, whatever is installed.
        proc = subprocess.run([sys.executable, "-S", mha_bench.TORCH_SCRIPT, "--threads", "1",
                               "--out", os.devnull, "t:8:2:1:4:4:0"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, mha_bench.TORCH_MISSING)
        self.assertIn("PyTorch is not installed", proc.stderr)

    @unittest.skipIf(mha_bench.torch_python() is None, "python3-torch is not installed")
    def test_torch_mha_rows_read_as_bench_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "torch.json")
            subprocess.run([mha_bench.torch_python(), mha_bench.TORCH_SCRIPT, "--threads", "1",
                            "--repetitions", "2", "--min-time", "0.001", "--out", out,
                            "t:8:2:1:4:4:1", "gqa:16:4:1:4:4:1:2", "dec:16:4:2:1:8:0:2:1",
                            "--gemm", "p:4:8:16:1"], check=True, capture_output=True, timeout=300)
            with open(out, encoding="utf-8") as f:
                gbench = json.load(f)
        rows = mha_bench.results({"runs": [{"gbench": gbench}]})
        self.assertEqual(sorted((r["suite"], r["config"], r["impl"], r["threads"]) for r in rows),
                         [("attention", c, i, 1) for c in ("dec", "gqa", "t")
                          for i in ("pytorch", "pytorch_bf16")] +
                         [("gemm", "bf16_p", "pytorch", 1), ("gemm", "p", "pytorch", 1)])
        self.assertTrue(all(r["ms"] > 0 and r["gflops"] > 0 for r in rows))

    def test_ere_escape(self):
        self.assertEqual(mha_bench.ere_escape("a.b(c)/threads:1"), r"a\.b\(c\)/threads:1")


class ReportTest(TempDirTest):
    def test_table_text(self):
        status, out, err = run_main("report", fixture("record_a.json"), "--out", self.tmp)
        self.assertEqual(status, 0, err)
        expected = read(fixture("record_a.table.txt"))
        self.assertEqual(read(os.path.join(self.tmp, "table.txt")), expected)
        self.assertTrue(out.startswith(expected))

    def test_report_markdown_embeds_the_plots(self):
        status, _, err = run_main("report", fixture("record_a.json"), "--out", self.tmp)
        self.assertEqual(status, 0, err)
        md = read(os.path.join(self.tmp, "report.md"))
        self.assertIn("| gemm/sq1024 | 1 | avx512 | 16.000 | 134.2 | 74.6 |", md)
        if HAVE_MPL:
            for png in ("gflops_gemm.png", "gflops_attention.png", "thread_scaling.png",
                        "isa_avx2_vs_avx512.png"):
                self.assertIn("]({})".format(png), md)
                with open(os.path.join(self.tmp, png), "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_single_thread_single_isa_record_has_no_scaling_or_isa_plot(self):
        status, _, err = run_main("report", fixture("record_disjoint.json"), "--out", self.tmp)
        self.assertEqual(status, 0, err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "thread_scaling.png")))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "isa_avx2_vs_avx512.png")))


class CompareTest(TempDirTest):
    def test_compare_table(self):
        status, out, err = run_main("compare", fixture("record_a.json"), fixture("record_b.json"),
                                    "--out", self.tmp)
        self.assertEqual(status, 0, err)
        self.assertEqual(out.split("plot: ")[0], read(fixture("compare_ab.txt")))
        self.assertEqual(read(os.path.join(self.tmp, "compare.txt")),
                         read(fixture("compare_ab.txt")))
        if HAVE_MPL:
            self.assertTrue(os.path.isfile(os.path.join(self.tmp, "compare_ratio.png")))

    def test_compare_baselines_too(self):
        status, out, err = run_main("compare", fixture("record_a.json"), fixture("record_b.json"),
                                    "--impl", "openblas")
        self.assertEqual(status, 0, err)
        self.assertIn("gemm/sq1024    openblas    1  20.000  44.000  0.45x", out)


def write_record(path, times_ms, isa="avx512"):
    """A minimal record of one run: {benchmark name: ms}, one iteration each."""
    benchmarks = [{"name": name, "run_name": name, "run_type": "iteration", "real_time": ms * 1e6,
                   "time_unit": "ns"} for name, ms in times_ms.items()]
    record = {"format": "mha-bench-record", "format_version": 1,
              "machine": {"cpu_model": "Test CPU", "isa_chosen": isa},
              "runs": [{"gbench": {"context": {"mha_isa": isa}, "benchmarks": benchmarks}}]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f)
    return path


class CrossCpuTest(unittest.TestCase):
    def test_one_column_per_machine_with_labels(self):
        status, out, err = run_main("crosscpu", "A=" + fixture("record_a.json"),
                                    fixture("record_b.json"))
        self.assertEqual(status, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "| configuration | thr | A | Neoverse-V1 |")
        self.assertIn("| gemm/sq1024 | 1 | 16.000 / - (1.12x onednn) | "
                      "40.000 / - (1.10x openblas) |", lines)
        self.assertIn("| attention/decode_kv2048 | 1 | 0.500 / - | - |", lines)

    def test_records_without_key_rows(self):
        status, _, err = run_main("crosscpu", fixture("record_disjoint.json"))
        self.assertEqual(status, 2)
        self.assertIn("none of the key rows", err)


class SpreadTest(TempDirTest):
    """spread: one ratio per record against that record's best baseline."""

    def records(self, runs):
        paths = []
        for i, (mha, prepacked, onednn, openblas) in enumerate(runs):
            times = {"gemm/proj/mha/threads:1/real_time": mha,
                     "gemm/proj/mha_prepacked/threads:1/real_time": prepacked,
                     "gemm/proj/onednn/threads:1/real_time": onednn,
                     "gemm/proj/openblas/threads:1/real_time": openblas,
                     "gemm/solo/mha/threads:1/real_time": 1.0}  # no baseline: not listed
            paths.append(write_record(os.path.join(self.tmp, "r{}.json".format(i)), times))
        return paths

    def test_ratio_range_and_verdicts(self):
        # mha: 1.0/1.1, 1.2/1.0 (the best baseline is oneDNN, then OpenBLAS, then oneDNN)
        # and 1.0/0.8: ratios 0.91, 1.20, 1.25, mixed. prepacked: 2.0, 2.4, 2.0, above.
        paths = self.records([(1.1, 0.5, 1.0, 2.0), (1.0, 0.5, 1.3, 1.2), (0.8, 0.5, 1.0, 3.0)])
        status, out, err = run_main("spread", *paths, "--out", self.tmp)
        self.assertEqual(status, 0, err)
        lines = out.splitlines()
        self.assertIn("A: Test / avx512 / r0.json", lines)  # short_cpu
        mha = [l for l in lines if l.startswith("gemm/proj ")][0].split()
        self.assertEqual(mha, ["gemm/proj", "1", "1.000", "1.000", "2.000", "0.91x", "1.20x",
                               "1.25x", "-"])
        prepacked = [l for l in lines if l.startswith("gemm/proj prepacked")][0].split()
        self.assertEqual(prepacked[-5:], ["2.00x", "2.00x", "2.40x", ">=", "1.0"])
        self.assertNotIn("gemm/solo", out)
        self.assertIn("2 configurations: 1 at or above 1.0 in every record, 0 below 1.0 in "
                      "every record, 1 mixed.", out)
        self.assertEqual(read(os.path.join(self.tmp, "spread.txt")), out)

    def test_records_named_record_json_are_told_apart_by_folder(self):
        paths = []
        for run in ("run-a", "run-b"):
            os.makedirs(os.path.join(self.tmp, run))
            paths.append(write_record(os.path.join(self.tmp, run, "record.json"),
                                      {"gemm/sq64/mha/threads:1/real_time": 1.0,
                                       "gemm/sq64/onednn/threads:1/real_time": 1.0}))
        status, out, err = run_main("spread", *paths)
        self.assertEqual(status, 0, err)
        self.assertIn("A: Test / avx512 / run-a/record.json", out)
        self.assertIn("B: Test / avx512 / run-b/record.json", out)

    def test_below_in_every_record_is_named(self):
        paths = self.records([(1.2, 0.5, 1.0, 2.0), (1.1, 0.5, 1.0, 2.0)])
        status, out, err = run_main("spread", *paths)
        self.assertEqual(status, 0, err)
        self.assertIn("1 below 1.0 in every record (gemm/proj 1t)", out)

    def test_needs_two_records_with_a_common_baseline(self):
        self.assertEqual(run_main("spread", fixture("record_a.json"))[0], 2)
        lone = write_record(os.path.join(self.tmp, "lone.json"),
                            {"gemm/sq64/mha/threads:1/real_time": 1.0})
        status, _, err = run_main("spread", lone, lone)
        self.assertEqual(status, 2)
        self.assertIn("no configuration of ours with a baseline", err)


class ErrorTest(unittest.TestCase):
    """Every user error: one line on stderr, exit status 2, no traceback."""

    def check_error(self, argv, message):
        proc = run_tool(*argv)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertTrue(lines[0].startswith("mha_bench: error: "), lines[0])
        self.assertIn(message, lines[0])

    def test_truncated_json(self):
        self.check_error(["report", fixture("record_truncated.json")], "not valid JSON")

    def test_google_benchmark_json_without_machine_section(self):
        self.check_error(["compare", fixture("record_a.json"), fixture("gbench_only.json")],
                         "no 'machine' section")

    def test_runs_not_a_list(self):
        self.check_error(["report", fixture("record_bad_runs.json")], "malformed record")

    def test_context_not_an_object(self):
        self.check_error(["report", fixture("record_bad_context.json")],
                         "'context' is not an object")

    def test_field_of_the_wrong_type_deeper_in(self):
        self.check_error(["report", fixture("record_bad_peak.json")], "malformed input")

    def test_records_with_no_common_config(self):
        self.check_error(["compare", fixture("record_a.json"), fixture("record_disjoint.json")],
                         "no configuration (impl mha) is common to all records")

    def test_compare_needs_two_records(self):
        self.check_error(["compare", fixture("record_a.json")], "at least two records")

    def test_missing_file(self):
        self.check_error(["report", fixture("no_such_record.json")], "cannot read")

    def test_missing_binary(self):
        self.check_error(["run", "--build", FIXTURES, "--suite", "gemm"], "bench_gemm not found")

    def test_bad_threads(self):
        self.check_error(["run", "--build", FIXTURES, "--threads", "1,x"], "--threads")

    def test_unknown_isa(self):
        self.check_error(["run", "--build", FIXTURES, "--isa", "avx2,sse9"], "unknown ISA 'sse9'")

    def test_unknown_subcommand(self):
        self.check_error(["frobnicate"], "invalid choice")


class RunTest(TempDirTest):
    def test_headline_runs_what_exists_and_reports(self):
        build = self.fake_build(["gemm", "attention"])
        out_dir = os.path.join(self.tmp, "out")
        status, out, err = run_main("headline", "--build", build, "--out", out_dir)
        self.assertEqual(status, 0, err)
        self.assertIn("missing: bench_softmax not found", out)
        self.assertIn("[9/9] gemm/gemv_n2304/onednn/threads:1/real_time  0.055 ms", out)
        record = mha_bench.load_record(os.path.join(out_dir, "record.json"))
        machine = record["machine"]
        self.assertEqual(machine["isa_chosen"], "avx512")
        self.assertEqual(machine["isas_run"], ["avx2", "avx512"])
        self.assertEqual(machine["mha_git_rev"], "abc1234")
        self.assertEqual(machine["peak_gflops"]["avx512"], {"1": 200.0, "2": 400.0})
        self.assertTrue(machine["caches"] or not os.path.isdir("/sys/devices/system/cpu"))
        # gemm and attention at the chosen ISA, then the AVX2 comparison runs.
        self.assertEqual([(r["binary"], r["env"].get("MHA_ISA")) for r in record["runs"]],
                         [("bench_gemm", None), ("bench_attention", None),
                          ("bench_gemm", "avx2"), ("bench_attention", "avx2")])
        table = read(os.path.join(out_dir, "table.txt"))
        self.assertIn("gemm/sq1024                      1  avx2    17.000", table)
        self.assertIn("attention/bert_b1_s128           2  avx512  11.111", table)
        self.assertNotIn("gpt2", table)  # not in the fake binary: simply absent

    def test_run_isa_sweep_skips_isas_the_cpu_lacks(self):
        build = self.fake_build(["gemm"])
        out_dir = os.path.join(self.tmp, "out")
        status, out, err = run_main("run", "--build", build, "--suite", "gemm", "--threads", "1",
                                    "--isa", "avx2,neon", "--repetitions", "1",
                                    "--filter", "sq1024", "--out", out_dir)
        self.assertEqual(status, 0, err)
        self.assertIn("skip bench_gemm MHA_ISA=neon", out)
        record = mha_bench.load_record(os.path.join(out_dir, "record.json"))
        names = [b["name"] for b in record["runs"][0]["gbench"]["benchmarks"]]
        self.assertEqual(names, ["gemm/sq1024/mha/threads:1/real_time",
                                 "gemm/sq1024/openblas/threads:1/real_time",
                                 "gemm/sq1024/onednn/threads:1/real_time"])
        self.assertEqual(record["skipped"],
                         ["bench_gemm MHA_ISA=neon: ISA not supported on this CPU"])

    def test_run_isa_sweep_runs_baselines_capped_to_each_isa(self):
        build = self.fake_build(["gemm"])
        out_dir = os.path.join(self.tmp, "out")
        # The tool owns these: an ambient value (some images set one) is replaced.
        with ambient_env("OPENBLAS_CORETYPE", "Prescott"):
            status, out, err = run_main("run", "--build", build, "--suite", "gemm", "--threads",
                                        "1", "--isa", "neon,avx512,avx2", "--repetitions", "1",
                                        "--filter", "sq1024", "--out", out_dir)
        self.assertEqual(status, 0, err)
        self.assertEqual(out.count("note: OPENBLAS_CORETYPE=Prescott from the environment"), 1)
        record = mha_bench.load_record(os.path.join(out_dir, "record.json"))
        impls = [[mha_bench.parse_name(b["name"])[2] for b in r["gbench"]["benchmarks"]]
                 for r in record["runs"]]
        self.assertEqual(impls, [["mha", "openblas", "onednn"], ["mha", "openblas", "onednn"]])
        self.assertEqual([(r["env"].get("ONEDNN_MAX_CPU_ISA"), r["env"].get("OPENBLAS_CORETYPE"))
                          for r in record["runs"]],
                         [("AVX512_CORE", "SkylakeX"), ("AVX2", "Haswell")])
        self.assertIn("gemm/sq1024      1  avx2    17.000    126.3   63.2     -  onednn 11.000 ms  "
                      "0.65x", out)

    def test_a_run_without_isa_lets_the_baselines_pick_their_best(self):
        build = self.fake_build(["gemm"])
        out_dir = os.path.join(self.tmp, "out")
        with ambient_env("OPENBLAS_CORETYPE", "Haswell"):
            status, _, err = run_main("run", "--build", build, "--suite", "gemm", "--threads", "1",
                                      "--repetitions", "1", "--filter", "sq1024", "--out", out_dir)
        self.assertEqual(status, 0, err)
        record = mha_bench.load_record(os.path.join(out_dir, "record.json"))
        self.assertNotIn("OPENBLAS_CORETYPE", record["runs"][0]["env"])
        self.assertNotIn("ONEDNN_MAX_CPU_ISA", record["runs"][0]["env"])

    def test_a_failing_binary_is_named_with_its_last_error_line(self):
        build = self.fake_build(["gemm"])
        os.environ["FAKE_BENCH_FAIL"] = "1"
        try:
            status, _, err = run_main("run", "--build", build, "--suite", "gemm",
                                      "--out", os.path.join(self.tmp, "out"))
        finally:
            del os.environ["FAKE_BENCH_FAIL"]
        self.assertEqual(status, 2)
        self.assertEqual(err, "mha_bench: error: bench_gemm failed (exit 3): "
                              "fake: something broke\n")

    def test_a_hanging_binary_times_out(self):
        build = self.fake_build(["gemm"])
        os.environ["FAKE_BENCH_HANG"] = "1"
        try:
            status, _, err = run_main("run", "--build", build, "--suite", "gemm", "--timeout", "1",
                                      "--out", os.path.join(self.tmp, "out"))
        finally:
            del os.environ["FAKE_BENCH_HANG"]
        self.assertEqual(status, 2)
        self.assertEqual(err, "mha_bench: error: bench_gemm timed out after 1 s\n")

    def test_run_with_nothing_runnable_is_an_error(self):
        build = self.fake_build(["gemm"])
        status, _, err = run_main("run", "--build", build, "--suite", "gemm", "--isa", "neon",
                                  "--out", os.path.join(self.tmp, "out"))
        self.assertEqual(status, 2)
        self.assertIn("nothing ran", err)

    @unittest.skipUnless(HAVE_MPL, "matplotlib not installed")
    def test_smoke_picks_one_config_per_suite(self):
        build = self.fake_build(["gemm", "softmax", "attention"])
        out_dir = os.path.join(self.tmp, "out")
        status, out, err = run_main("smoke", "--build", build, "--out", out_dir)
        self.assertEqual(status, 0, err)
        self.assertIn("smoke: OK", out)
        record = json.loads(read(os.path.join(out_dir, "record.json")))
        configs = sorted({mha_bench.parse_name(b["name"])[:2] for r in record["runs"]
                          for b in r["gbench"]["benchmarks"]})
        self.assertEqual(configs, [("attention", "tiny_e256_h4_b1_s32"), ("gemm", "sq1024"),
                                   ("reshape", "split_s128"), ("softmax", "rows1024")])


if __name__ == "__main__":
    unittest.main()
