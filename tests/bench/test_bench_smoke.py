"""Tiny runs of the benchmarks, so that they cannot rot (speed is measured in bench/, not here)."""

import json
import re

import numpy as np
import pytest
import yaml

from bench import prepare as bench_prepare


def test_prepare_bench_smoke(tmp_path):
    out = tmp_path / "prepare.json"
    result = bench_prepare.main(["--smoke", "--workdir", str(tmp_path / "work"), "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["nodes"] == result["nodes"] == 20_000
    for key in ("peak_rss_bytes", "memory_budget_bytes", "write_MBps", "disk", "machine", "wall_s"):
        assert key in saved
    assert saved["disk"]["MBps"] > 0 and saved["peak_rss_bytes"] > 0
    assert saved["peak_rss_bytes"] <= saved["memory_budget_bytes"]


def test_offline_bench_smoke(tmp_path):
    from bench import offline as bench_offline

    result = bench_offline.main(["--smoke", "--workdir", str(tmp_path), "--out", str(tmp_path / "offline.json")])
    saved = json.loads((tmp_path / "offline.json").read_text())
    assert saved["batches"] == result["batches"] >= 1
    assert [t["cache_fraction"] for t in saved["tiers"]] == [0.05, 0.1, 0.3]
    rates = [t["expected_hit_rate"] for t in saved["tiers"]]
    assert rates == sorted(rates) and 0 < rates[0] <= 1
    assert saved["pack_rows"] > 0 and saved["disk"]["MBps"] > 0 and saved["pack_over_disk_seq_write"] > 0


def test_dependent_bench_smoke(tmp_path):
    """bench.dependent at tiny size, uncapped: neighbour sampling and LABOR with layer dependency at κ 1 and 4,
    two seeds each, every row filled with accuracies paired by seed, and its table and plot written into a
    report of their own, twice without duplicating."""
    from bench import dependent

    md = tmp_path / "report.md"
    md.write_text("# notes\n")
    args = ["--smoke", "--no-cap", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "d.json"),
            "--report", str(md), "--seeds", "2", "--eval-batches", "2"]
    result = dependent.main(args)
    names = [r["setting"] for r in result["rows"]]
    assert names == ["neighbor", "labor + layer dep., κ=1", "labor + layer dep., κ=4"]
    for r in result["rows"]:
        assert "error" not in r, r
        assert r["input_rows"] > 0 and r["first_layer_dst"] > 0 and r["read_bytes"] >= 0
        assert sorted(r["test_acc"]) == [0, 1] and all(0 <= a <= 1 for a in r["test_acc"].values())
        assert r["seeds"] == 2 and len(r["val_acc_per_epoch"]) == 2
    delta = 100 * sum(result["rows"][1]["test_acc"][s] - result["rows"][0]["test_acc"][s] for s in (0, 1)) / 2
    assert result["rows"][1]["test_delta"] == pytest.approx(delta)
    assert result["rows"][2]["hit_rates"].get("recent", 0) > 0  # κ=4 keeps the last batch's rows
    assert "recent" not in result["rows"][0]["hit_rates"]
    dependent.main(args)
    text = md.read_text()
    begin = dependent.markers("synthetic-20000")[0]
    assert text.startswith("# notes") and text.count(begin) == 1 and "| neighbor |" in text
    assert (tmp_path / "bench" / "dependent-synthetic-20000.png").stat().st_size > 0


def test_suite_smoke_fills_every_row_and_renders_the_report(tmp_path):
    """`make bench` at tiny size: every system of the epoch grid ran or says why, scaling covers every scale,
    and the report (markdown section + four PNGs) is written, replacing only its own section."""
    from bench import suite
    from bench.epoch import CAPPED, UNCAPPED
    from bench.harness.memcap import CapUnavailable, run_capped
    from bench.report.markdown import BEGIN, END, W2_BEGIN, W2_END, render
    from bench.report.tables import LABELS, SHORT

    try:
        run_capped(["true"], "256MiB")
    except CapUnavailable as e:
        pytest.skip(f"the suite's capped runs need a memory cgroup: {e}")
    out = tmp_path / "suite"
    suite.main(["--smoke", "--out-dir", str(out)])
    epoch = json.loads((out / "epoch.json").read_text())
    runs = {**epoch["uncapped"], **epoch["caps"]["1GiB"]["runs"]}
    assert set(runs) == set(UNCAPPED) | set(CAPPED)
    why_not = {"pyg": "PyG not installed: ", "dgl": "DGL 2.1.0 is not installed in ",
               "marius": "not installed: put marius_train on PATH or set DISKGNN_MARIUS",
               "ginex": "not installed: set DISKGNN_GINEX"}
    for name, run in runs.items():
        peer = name.split("_")[0]
        if peer in why_not and run.get("not_installed"):
            assert run["error"].startswith(why_not[peer]), run  # the row says why, and how to fix it
            continue
        assert "error" not in run, (name, run)
        assert run["per_batch_s"] > 0, name
        if name.startswith("naive"):  # a rate over its 3 batches
            assert run["batches_done"] == 3 and "test_acc" not in run, name
            continue
        # 2 epochs of 3 batches, evaluated after each on the same nodes, the best epoch's test accuracy
        assert run.get("batches_done", run["batches"]) == 6 and run["epochs_done"] == 2, name
        assert len(run["val_acc_per_epoch"]) == 2 and 0 <= run["test_acc"] <= 1, name
        # time to accuracy: the process's age at each validation, its imports and training within it
        wall = run["wall_s_at_val"]
        assert wall[1] > wall[0] > run["train_s_per_epoch"][0] > 0, name
    assert epoch["uncapped"]["diskgnn_all_cached"]["disk_bytes_read"] == 0
    assert epoch["caps"]["1GiB"]["runs"]["diskgnn"]["cgroup_peak_bytes"] <= 1 << 30
    scaling = json.loads((out / "scaling.json").read_text())
    nodes = [p["nodes"] for p in scaling["points"]]
    assert nodes == [5_000, 10_000, 20_000, 40_000]
    batches = [p["batches"] for p in scaling["points"]]
    assert batches == sorted(batches) and batches[-1] > batches[0]  # a whole epoch grows with the graph
    assert len(scaling["fits"]["epoch"]["deviation"]) == 4
    limits = json.loads((out / "limits.json").read_text())
    assert limits["sequential_1m"]["MBps"] > 0 if "error" not in limits else "fio" in limits["error"]
    # W2 (power-law): diskgnn, MariusGNN and Ginex alone, evaluated, or a peer's row says why not
    w2 = json.loads((out / "w2.json").read_text())
    w2_runs = w2["caps"]["1GiB"]["runs"]
    assert w2["nodes"] == 20_000 and len(w2_runs["diskgnn"]["val_acc_per_epoch"]) == 2
    for peer in ("marius", "ginex"):
        assert "val_acc_per_epoch" in w2_runs[peer] or w2_runs[peer]["error"].startswith(why_not[peer])
    assert all(r.get("not_selected") for n, r in w2_runs.items() if n not in ("diskgnn", "marius", "ginex"))

    md = out / "benchmarks.md"
    text = md.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    for name in runs:
        assert LABELS[name] in text
    assert "| system | cap | epoch | epochs done | test acc" in text
    w2_text = text[text.index("### W2: diskgnn, MariusGNN and Ginex, node classification"):]
    w2_rows = [x for x in w2_text[: w2_text.index(W2_END)].splitlines() if x.startswith("| ") and "---" not in x]
    assert [x.split(" | ")[0][2:] for x in w2_rows[1:]] == [SHORT["diskgnn"], SHORT["marius"], SHORT["ginex"]], w2_rows
    diskgnn_row = next(x for x in text.splitlines() if x.startswith(f"| {SHORT['diskgnn']} | 1GiB |"))
    assert re.search(r"\*\*[\d.]+ s\*\* \(training [\d.]+ s; sampling [\d.]+ s \+ packing", diskgnn_row), diskgnn_row
    for png in ("epoch", "peers", "scaling", "disk", "stages"):
        assert (out / "bench" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Re-rendering into a file with hand-written notes replaces the section only.
    md.write_text("# notes before\n\n" + text + "\n## notes after\n")
    render(out / "suite.json", md, out / "bench")
    again = md.read_text()
    assert again.startswith("# notes before") and again.rstrip().endswith("## notes after")
    assert again.count(BEGIN) == 1
    # On a CUDA machine the grid adds diskgnn's GPU rows; the report shows them with the utilisation.
    gpu = {"mean_percent": 42.0, "max_percent": 97.0, "samples": 5, "max_memory_mib": 900.0}
    epoch["cuda"] = True
    epoch["uncapped"]["diskgnn_cuda_all_cached"] = {**epoch["uncapped"]["diskgnn_all_cached"], "gpu_utilisation": gpu}
    epoch["caps"]["1GiB"]["runs"]["diskgnn_cuda"] = {**epoch["caps"]["1GiB"]["runs"]["diskgnn"], "gpu_utilisation": gpu}
    (out / "epoch.json").write_text(json.dumps(epoch))
    render(out / "suite.json", md, out / "bench")
    with_gpu = md.read_text()
    assert LABELS["diskgnn_cuda"] in with_gpu and "GPU busy 42 % (peak 97)" in with_gpu
    # A partial suite (--steps limits,epoch or epoch alone) has no file for the rest; the report says so.
    s = json.loads((out / "suite.json").read_text())
    s["files"] = {"epoch": s["files"]["epoch"]}
    (out / "suite.json").write_text(json.dumps(s))
    render(out / "suite.json", md, out / "bench")
    partial = md.read_text()
    assert "### Scaling\n\nNot run in this session" in partial and "| fio | not run: not run in this session" in partial
    assert partial.count(W2_BEGIN) == 1 and w2_text[:2000] in partial  # W2's section stays as it was
    # Every capped diskgnn run failed (no bar has a ratio): the plots still render, on linear axes.
    for cap in epoch["caps"].values():
        cap["runs"]["diskgnn"] = {"error": "diskgnn-1GiB: exit 1: broken"}
    (out / "epoch.json").write_text(json.dumps(epoch))
    render(out / "suite.json", md, out / "bench")
    assert "broken" in md.read_text()
    # The W2 step alone (--steps w2) rewrites its own section, not W1's.
    broken = md.read_text()
    s["files"] = {"w2": str(out / "w2.json")}
    (out / "suite.json").write_text(json.dumps(s))
    md.write_text(broken.replace("W2: W1's sizes", "stale"))
    render(out / "suite.json", md, out / "bench")
    assert md.read_text() == broken
    with pytest.raises(SystemExit, match="epoch among them"):
        suite.main(["--smoke", "--out-dir", str(out), "--steps", "limits,scaling"])


def test_nvidia_smi_samples_are_parsed():
    from bench.harness.common import parse_nvidia_smi

    r = parse_nvidia_smi("35, 1200\n85, 1300\n[N/A], [N/A]\n")
    assert r == {"samples": 2, "mean_percent": 60.0, "max_percent": 85.0, "max_memory_mib": 1300.0}
    assert "error" in parse_nvidia_smi("")


def test_proportional_fit_is_the_median_time_per_node():
    from bench.scaling import least_squares_fit, proportional_fit

    exact = proportional_fit([1, 2, 4], [3.0, 6.0, 12.0])
    assert exact["seconds_per_million_nodes"] == pytest.approx(3e6) and exact["max_abs_deviation"] < 1e-12
    assert exact["linear"]
    fixed_cost = proportional_fit([1, 2, 4], [4.0, 7.0, 13.0])  # 1 s of overhead is not linear
    assert fixed_cost["deviation"][0] > 0.1 and not fixed_cost["linear"]
    # One stray point does not move the line; least squares, led by the largest graph, tilts to it.
    stray = [1.0, 2.0, 4.0, 10.4]
    assert proportional_fit([1, 2, 4, 8], stray)["deviation"][:3] == pytest.approx([0, 0, 0])
    assert not least_squares_fit([1, 2, 4, 8], stray)["linear"]  # the smallest graph 18 % below its line
    assert least_squares_fit([1, 2, 4], [3.0, 6.0, 12.0])["seconds_per_million_nodes"] == pytest.approx(3e6)


def test_paired_fit_cancels_drift_between_repeats_but_not_a_bend():
    from bench.scaling import paired_fit, proportional_fit

    nodes = [1, 2, 4, 8]
    # Repeat 2 ran on a machine 30 % slower throughout, repeat 3 on one 20 % faster, with one run 30 % slow.
    drift = paired_fit(nodes, [[1.0, 2.0, 4.0, 8.0], [1.3, 2.6, 5.2, 10.4], [0.8, 1.6 * 1.3, 3.2, 6.4]])
    assert drift["max_abs_deviation"] < 1e-12 and drift["linear"] and drift["repeats"] == 3
    assert drift["per_repeat_deviation"][2][1] > 0.2  # each repeat's own deviations are kept
    assert drift["seconds_per_million_nodes"] == pytest.approx(proportional_fit(
        nodes, [1.0, 2.0, 4.0, 8.0])["seconds_per_million_nodes"])
    # A point slow in every repeat stays slow.
    bent = paired_fit(nodes, [[1.0, 2.6, 4.0, 8.0], [1.1, 2.9, 4.4, 8.8], [0.9, 2.3, 3.6, 7.2]])
    assert bent["deviation"][1] > 0.2 and not bent["linear"]
    assert not bent["least_squares"]["linear"]


def test_distributed_bench_smoke(tmp_path):
    """bench.distributed at tiny size, uncapped: 2 processes and 2 one-process "nodes", independent and
    cooperative; every row filled, cooperative reads fewer rows per seed and sends some all-to-all, and the
    report section is written once."""
    from bench import distributed

    md = tmp_path / "report.md"
    md.write_text("# notes\n")
    args = ["--smoke", "--no-cap", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "d.json"),
            "--report", str(md)]
    result = distributed.main(args)
    assert [(r["layout"], r["mode"]) for r in result["rows"]] == [
        ("2 processes", "independent"), ("2 processes", "cooperative"), ("2 nodes x 1", "independent"),
        ("2 nodes x 1", "cooperative")]
    for r in result["rows"]:
        assert "error" not in r, r
        assert r["read_bytes_per_seed"] > 0 and r["input_rows_per_seed"] > 0 and 0 <= r["test_acc"] <= 1
        assert (r["exchange_bytes_per_seed"] > 0) == (r["mode"] == "cooperative")
    coop = result["rows"][1]
    assert coop["input_rows_per_seed_vs_independent"] < 1  # the shared batch's union is smaller
    distributed.main(args)
    text = md.read_text()
    assert text.startswith("# notes") and text.count(distributed.markers("synthetic-20000")[0]) == 1
    assert "| 2 nodes x 1 | cooperative |" in text
    assert (tmp_path / "bench" / "distributed-synthetic-20000.png").stat().st_size > 0


def test_hag_bench_smoke(tmp_path):
    """bench.hag at tiny size: W1's sampled blocks in three samplings, Cora's whole graph (redundant: fewer rows
    through its HAG; the cost model's constants from its timings), inference through Cora's stored HAG equal to
    plain inference, and --hag off against on end to end, with the same accuracy; the report section once."""
    from bench import hag
    from conftest import shared_dataset

    shared = shared_dataset("planetoid_cora").parent
    md = tmp_path / "report.md"
    md.write_text("# notes\n")
    args = ["--smoke", "--shared", str(shared), "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "h.json"),
            "--report", str(md)]
    result = hag.main(args)
    assert [r["setting"] for r in result["sampled"]] == list(hag.SAMPLED)
    for r in result["sampled"]:
        # the share is timed apart from the step: at this size noise can put it above 1
        assert r["blocks"] == 2 * r["batches"] and r["rows_hag"] <= r["rows_plain"] and r["aggregation_share"] > 0
    (cora,) = result["whole"]
    assert cora["rows_hag"] < cora["rows_plain"] and cora["agg_nodes"] > 0
    assert all(cora[f"{k}_{d}_s"] > 0 for k in ("plain", "rewritten", "hag") for d in ("fwd", "bwd"))
    assert len(result["calibration"]["saved_row_costs"]) == 2 and result["calibration"]["node_cost"] != 0
    (inf,) = result["inference"]  # Cora's whole graph is one chunk: it runs through its stored HAG
    assert inf["chunks_hag"] == inf["chunks"] == 1 and inf["rows_hag"] < inf["rows_plain"]
    assert inf["max_abs_diff"] < 1e-3 and inf["same_argmax"] > 0.99
    runs = {(r["dataset"], r["hag"]): r for r in result["train"]}
    for name in ("cora", "synthetic-20000"):
        assert "error" not in runs[(name, "off")] and "error" not in runs[(name, "on")], runs
        assert runs[(name, "on")]["test_acc"] == pytest.approx(runs[(name, "off")]["test_acc"], abs=0.02)
    assert runs[("cora", "on")]["hag_stats"]["used"] > 0
    hag.main(args)
    assert md.read_text().count(hag.MARKERS[0]) == 1
    # without real graphs (--datasets ''), as on W2 alone: the table has the sampled blocks and no calibration
    alone = hag.table({**result, "w1": "/data/w2", "whole": [], "inference": [], "train": [],
                       "calibration": hag.calibration([])})
    assert alone.startswith("Blocks: w2's first") and "Cost model constants" not in alone


def test_step_bench_smoke(tmp_path):
    """bench.step at tiny size: each model's step in fp32 and bf16 beside its linear maps alone, with a profile
    whose ops include the native neighbour sum; the report section once."""
    from bench import step

    md = tmp_path / "report.md"
    md.write_text("# notes\n")
    args = ["--smoke", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "s.json"), "--report", str(md)]
    result = step.main(args)
    assert [(r["model"], r["precision"]) for r in result["rows"]] == [
        ("sage", "fp32"), ("sage", "bf16"), ("gat", "fp32"), ("gat", "bf16")]
    for r in result["rows"]:
        assert r["step_ms"] > 0 and r["floor_ms"] > 0 and r["profile"]
    assert any(p["op"] == "NeighbourSum" for p in result["rows"][0]["profile"])
    step.main(args)
    assert md.read_text().count(step.MARKERS[0]) == 1


def test_hetero_bench_smoke(tmp_path):
    """bench.hetero at tiny size: a MAG-shaped graph prepared, trained one epoch under a cgroup cap from its stored
    rows and from their sq8 codes (quantized under the cap), its JSON with both runs and their ratios."""
    from bench import hetero
    from bench.harness.memcap import CapUnavailable

    try:
        result = hetero.main(["--smoke", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "h.json"),
                              "--features", "sq8"])
    except CapUnavailable as e:
        pytest.skip(f"no memory cgroup here ({e}); the cap itself is tested in tests/bench/test_memcap.py")
    saved = json.loads((tmp_path / "h.json").read_text())
    assert saved["papers"] == result["papers"] == 20_000 and len(saved["epoch_times_s"]) == 1
    assert saved["prepare"]["wall_s"] > 0 and 0 <= saved["feature_bytes"] - 20_000 * 32 * 2 < 4096  # float16, padded
    assert 0 <= saved["val_acc"][0] <= 1 and saved["backend"] in ("io_uring + O_DIRECT", "pread + O_DIRECT",
                                                                   "io_uring", "pread")
    assert saved["cgroup"]["returncode"] == 0 and not saved["cgroup"]["oom_killed"]
    assert saved["peak_anon_bytes"] <= 1536 << 20
    q = saved["quantized"]
    assert q["features"] == ["sq8"] and q["cgroup"]["returncode"] == 0 and 0 <= q["val_acc"][0] <= 1
    assert 0 < saved["ratios"]["disk_bytes"] <= 1 and saved["ratios"]["epoch_time"] > 0


def test_link_bench_smoke(tmp_path, monkeypatch):
    """bench.link at tiny size: diskgnn's partitioned link run under a cap, and MariusGNN's export trained by a
    stand-in marius_train (which saves a model) and ranked by a stand-in marius_eval, whose evaluation blocks are
    parsed into the same row and compared."""
    from bench import link
    from bench.harness.memcap import CapUnavailable

    fake = tmp_path / "bin" / "marius_train"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '[04/05/22 18:41:40.000] Start'\necho '[04/05/22 18:41:49.199] Epoch Runtime: "
                    "63ms'\necho '[04/05/22 18:41:49.199] ####### Finished training epoch 1 #######'\n"
                    "mkdir -p \"$(dirname \"$1\")/model\" && touch \"$(dirname \"$1\")/model/model.pt\"\n")
    (fake.parent / "marius_eval").write_text(
        "#!/bin/sh\necho '[04/05/22 18:42:00.000] Evaluating test set'\n"
        "case \"$1\" in *eval-val-*) echo 'MRR: 0.000100';; *) echo 'MRR: 0.000200'; echo 'Hits@10: 0.01';; esac\n")
    for exe in fake, fake.parent / "marius_eval":
        exe.chmod(0o755)
    monkeypatch.setenv("DISKGNN_MARIUS", str(fake))
    try:
        result = link.main(["--smoke", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "l.json"),
                            "--marius-capacity", "2"])
    except CapUnavailable as e:
        pytest.skip(f"no memory cgroup here ({e}); the cap itself is tested in tests/bench/test_memcap.py")
    saved = json.loads((tmp_path / "l.json").read_text())
    rows = {r["system"]: r for r in saved["caps"]["1GiB"]["rows"]}
    d, m = rows["diskgnn"], rows["marius"]
    assert d["status"] == "ok" and len(d["epoch_times_s"]) == 1 and 0 <= d["val_mrr_per_epoch"][0] <= 1, d
    assert d["wall_s_at_val"][0] > 0 and d["disk_written_bytes"] >= 0 and d["cgroup"]["returncode"] == 0
    inside = [v for v in d["validations"] if v["batch"] is not None]  # --val-every 20 inside the epoch
    assert inside and [v["batch"] for v in inside] == list(range(20, 20 * len(inside) + 1, 20)), d["validations"]
    assert m["status"] == "ok" and m["val_mrr_per_epoch"] == [0.0001] and m["test_mrr"] == 0.0002, m
    assert m["wall_s_at_val"] == [pytest.approx(m["export_s"] + 9.199)] and m["buffer_plan"]["buffer_capacity"] == 2
    assert m["test_hits@10"] == 0.01 and m["eval_s"] > 0 and "why" not in m, m
    from diskgnn.data.format import open_dataset

    held_out = open_dataset(tmp_path / "work" / "lp-20000").held_out_edges("val")
    evaluated = yaml.safe_load((tmp_path / "work" / "marius-1GiB" / "eval-val-model.yaml").read_text())["storage"]
    assert evaluated["full_graph_evaluation"] and evaluated["dataset"]["num_test"] == min(2000, len(held_out))
    exported = np.fromfile(tmp_path / "work" / "marius-1GiB" / "edges" / "validation_edges.bin", "<i4")
    assert exported.size == 2 * min(2000, len(held_out))  # the first --eval-edges held-out edges, int32 pairs
    comparison = saved["caps"]["1GiB"]["comparison"]
    assert comparison["common_target"] == min(max(v["val"] for v in d["validations"]), 0.0001) == result["caps"][
        "1GiB"]["comparison"]["common_target"]
    assert comparison["at_epoch_ends"]["common_target"] == min(d["val_mrr_per_epoch"][0], 0.0001)


def test_infer_bench_smoke(tmp_path):
    """bench.infer at tiny size: a model trained a few batches, every node's predictions written under a cap, their
    test accuracy the training run's --eval full, a run killed and rerun to the same bytes, and PyG's in-memory
    layer-wise inference of the same model agreeing with them."""
    from bench import infer
    from bench.harness.memcap import CapUnavailable

    try:
        result = infer.main(["--smoke", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "i.json"),
                             "--eval", "full", "--kill-at", "0.7"])
    except CapUnavailable as e:
        pytest.skip(f"no memory cgroup here ({e}); the cap itself is tested in tests/bench/test_memcap.py")
    saved = json.loads((tmp_path / "i.json").read_text())
    row = saved["diskgnn"]
    assert row["cgroup"]["returncode"] == 0 and not row["cgroup"]["oom_killed"] and row["rows_per_s"] > 0
    assert row["manifest"]["shape"] == [20_000] and 0 <= row["test_acc"] <= 1 and row["disk_written_bytes"] >= 0
    trained, tests = saved["train"], 0.8 * 20_000
    assert abs(trained["test_acc"] - row["test_acc"]) <= 2 / tests, (trained, row)  # the run's --eval full
    killed = row["killed"]
    assert killed["status"].startswith("finished") or killed["byte_identical"], killed
    pyg = result["pyg"]
    if pyg["status"] != "ok":
        pytest.skip(f"PyG: {pyg['status']} ({pyg.get('why')}); diskgnn's row was checked")
    assert pyg["agreement"] > 0.999 and pyg["test_acc"] == pytest.approx(row["test_acc"], abs=1e-3)

