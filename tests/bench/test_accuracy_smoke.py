"""The accuracy benchmark at a tiny size (Cora, 1 seed, 3 epochs), so that it cannot rot."""

import json
import math

import pytest

from conftest import shared_dataset


def test_accuracy_bench_smoke(tmp_path):
    shared_dataset("planetoid_cora")
    from bench.accuracy.cli import main
    from bench.accuracy.quantized import QUANT_MARKERS

    out, md = tmp_path / "accuracy.json", tmp_path / "accuracy.md"
    from bench.accuracy.reference_study import REFERENCE_MARKERS

    begin, end = QUANT_MARKERS
    md.write_text(f"{REFERENCE_MARKERS[0]}\n# An older reference table\n{REFERENCE_MARKERS[1]}\n\nA note of "
                  f"one's own.\n\n{begin}\nthe quantized study's tables\n{end}\n\n## Another study\n")
    # A quarter of the features in the host tier, so that offline batches also read their packs.
    main(["--smoke", "--host-cache-fraction", "0.25", "--workdir", str(tmp_path / "work"),
          "--out", str(out), "--markdown", str(md)])
    saved = json.loads(out.read_text())
    for key in ("machine", "versions", "command", "hyperparameters", "datasets", "runs", "aggregate", "wall_s"):
        assert key in saved
    assert saved["datasets"]["cora"]["splits"] == {"train": 140, "val": 500, "test": 1000}  # the public split
    assert saved["datasets"]["cora"]["epochs"] == 3
    runs = {(r["model"], r["mode"]) for r in saved["runs"]}
    assert runs == {(m, mode) for m in ("sage", "gcn") for mode in ("reference", "offline", "online")}
    for r in saved["runs"]:
        assert math.isfinite(r["test_acc"]) and 0 <= r["test_acc"] <= 1, r
        assert 0 <= r["best_epoch"] < 3
    offline = [r for r in saved["runs"] if r["mode"] == "offline"]
    assert all(0 < r["tier_hit_rates"]["host"] < 1 for r in offline)
    assert [(a["dataset"], a["model"]) for a in saved["aggregate"]] == [("cora", "sage"), ("cora", "gcn")]
    for a in saved["aggregate"]:
        assert a["offline_minus_reference"] == pytest.approx(100 * (a["offline"]["mean"] - a["reference"]["mean"]))
        assert isinstance(a["pass_reference"], bool) and isinstance(a["pass_online"], bool)
    text = md.read_text()
    assert "| cora | sage |" in text and "| cora | gcn |" in text and saved["command"] in text
    # The reference study rewrites its own part only: the other studies' sections and the notes stay (it used
    # to write the whole file but the quantized section).
    assert "An older reference table" not in text and text.startswith(REFERENCE_MARKERS[0])
    assert text.endswith(f"\n\nA note of one's own.\n\n{begin}\nthe quantized study's tables\n{end}\n\n## Another study\n")
    # The workdirs of the runs are removed; only the logs stay.
    assert not any((tmp_path / "work" / "runs").iterdir())


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_trainer_without_sampling_or_dropout_follows_the_reference(tmp_path, model):
    """All neighbours (fanouts -1,-1), no dropout, one batch: diskgnn.train and the reference take the same
    Adam steps from the same weights, so their val curves agree epoch by epoch (up to float summation order)."""
    shared = shared_dataset("planetoid_cora").parent
    from bench.accuracy.datasets import prepared
    from bench.accuracy.runs import BATCH_SIZE, HPARAMS
    from bench.harness.reference import reference_train
    from diskgnn.train.config import TrainConfig
    from diskgnn.train.loop import train

    data = prepared("cora", shared, tmp_path / "data")
    hp = {**HPARAMS, "dropout": 0.0}
    ref = reference_train(data, model, epochs=8, seed=3, **hp)
    cfg = TrainConfig(data=str(data), model=model, fanouts="-1,-1", batch_size=BATCH_SIZE, epochs=8,
                      seed=3, workdir=str(tmp_path / "run"), progress=False, **hp)
    summary = train(cfg)
    tolerance = 2 / 500  # two of Cora's 500 val nodes
    assert summary["val_acc_per_epoch"] == pytest.approx(ref["val_acc_per_epoch"], abs=tolerance)
    assert summary["test_acc"] == pytest.approx(ref["test_acc"], abs=2 / 1000)
    assert max(ref["val_acc_per_epoch"]) > 0.7  # it learned: equal curves are not two flat lines


def test_quantized_accuracy_bench_smoke(tmp_path):
    shared_dataset("planetoid_cora")
    from bench.accuracy.cli import main
    from bench.accuracy.datasets import SHARED, prepared
    from bench.accuracy.quantized import QUANT_MARKERS, with_variants

    out, md = tmp_path / "accuracy-quantized.json", tmp_path / "accuracy.md"
    md.write_text("# Accuracy\n\nThe reference study's part.\n")
    main(["--study", "quantized", "--smoke", "--host-cache-fraction", "0.25",
          "--workdir", str(tmp_path / "work"), "--out", str(out), "--markdown", str(md)])
    saved = json.loads(out.read_text())
    assert saved["features"] == ["fp32", "sq16", "sq1"]
    assert {(r["features"], r["seed"]) for r in saved["runs"]} == {(f, 0) for f in ("fp32", "sq16", "sq1")}
    for r in saved["runs"]:
        assert math.isfinite(r["test_acc"]) and 0 <= r["test_acc"] <= 1, r
        assert 0 < r["tier_hit_rates"]["host"] < 1  # the host tier holds a quarter of the code rows; packs the rest
    by = {a["features"]: a for a in saved["aggregate"]}
    # Cora: 1433 float32 values a row; sq16 stores 2 bytes a value, sq1 one bit (180 bytes, the last one padded).
    assert (by["fp32"]["row_bytes"], by["fp32"]["ratio"]) == (5732, 1.0)
    assert (by["sq16"]["row_bytes"], by["sq16"]["ratio"]) == (2866, 2.0)
    assert (by["sq1"]["row_bytes"], by["sq1"]["ratio"]) == (180, 5732 / 180)
    # sq1's params are its two levels, its mean and the data's shape (192 bytes with alignment); sq16's its
    # 65536-entry lookup and thresholds.
    assert by["sq1"]["ratio_with_params"] == 2708 * 5732 / (2708 * 180 + 192)
    # Cora's features are 0/1 and sparse: sq1 keeps the zeros and decodes every 1 exactly.
    assert by["sq1"]["rel_error"] == 0 and not by["sq1"]["refused"]
    assert 1.8 < by["sq16"]["ratio_with_params"] < 2.0
    base = by["fp32"]["test"]["mean"]
    for name in ("sq16", "sq1"):
        assert by[name]["delta"] == pytest.approx(100 * (by[name]["test"]["mean"] - base))
    # sq16 is within 0.03 % of Cora's 0/1 values and its run has fp32's weights, batches and dropout masks.
    assert by["sq16"]["rel_error"] < 1e-3
    assert abs(by["sq16"]["delta"]) <= 2.0
    assert saved["bounds"]["datasets"] == ["cora"] and saved["bounds"]["eight_bit"] == []
    assert saved["bounds"]["best_30x"]["features"] == "sq1"
    text = md.read_text()
    assert text.startswith("# Accuracy\n\nThe reference study's part.\n")
    assert text.count(QUANT_MARKERS[0]) == 1 and "| cora | sq1 | 180 | 31.84× |" in text
    assert saved["command"] in text
    # Rendered again from the saved runs: the same tables, and a line saying so.
    main(["--study", "quantized", "--render-only", "--out", str(out), "--markdown", str(md)])
    again = md.read_text()
    assert again.count(QUANT_MARKERS[0]) == 1 and "rendered from its saved runs" in again
    assert [line for line in again.splitlines() if line.startswith("| cora |")] == \
        [line for line in text.splitlines() if line.startswith("| cora |")]
    # The variants are stored once: a second study reuses them.
    again = with_variants(prepared("cora", SHARED, tmp_path / "work" / "data"), ["fp32", "sq16"])
    assert again["sq16"]["quantize_s"] is None and again["sq16"]["row_bytes"] == 2866


def test_quantized_bounds_and_sections(tmp_path):
    from bench.accuracy.datasets import DATASETS
    from bench.accuracy.quantized import QUANT_MARKERS, quantized_bounds
    from bench.accuracy.quantized_report import bounds_table
    from bench.harness.output import marked_section, write_section

    def row(dataset, features, delta, ratio):
        return {"dataset": dataset, "features": features, "delta": delta, "ratio": ratio, "delta_se": 0.2}

    real = list(DATASETS)
    rows = [row(d, "fp32", None, 1.0) for d in real]
    rows += [row(d, "sq8", -0.2, 4.0) for d in real]  # loses 0.2: passes
    rows += [row(d, "lin8", delta, 4.0) for d, delta in zip(real, (-1.0, 0.0, 0.0, -0.4))]  # loses 0.35: fails
    rows += [row(d, "sq8:p=0", 0.1, 4.0) for d in real]  # another 8-bit setting: held to the bound too
    rows += [row(d, "sq1", -3.0, 31.8) for d in real]
    rows += [row(d, "vq:w=16,L=2048", -0.5, 31.8) for d in real]
    rows += [row(d, "vq:w=12,L=1024", 0.0, 23.3) for d in real]  # under 30x: not a candidate
    rows += [row("synthetic", "sq8", -5.0, 4.0)]  # not a real dataset: not averaged
    b = quantized_bounds(rows)
    assert b["datasets"] == real
    assert [(c["features"], c["pass"]) for c in b["eight_bit"]] == [("sq8", True), ("lin8", False), ("sq8:p=0", True)]
    assert b["eight_bit"][1]["loss"] == pytest.approx(0.35)
    assert [c["features"] for c in b["over_30x"]] == ["sq1", "vq:w=16,L=2048"]
    assert (b["best_30x"]["features"], b["best_30x"]["loss"], b["best_30x"]["pass"]) == ("vq:w=16,L=2048", 0.5, True)
    table = bounds_table(b)
    assert b["eight_bit"][1]["se"] == pytest.approx(0.1)  # four independent s.e. of 0.2, averaged
    assert "| lin8 | +0.35 (0.10) | FAIL |" in table and "over the bound" in table  # sq1's row is shown, not hidden

    md = tmp_path / "accuracy.md"
    md.write_text("# Accuracy\n\nreference tables\n")
    write_section(md, "first", QUANT_MARKERS)
    write_section(md, "second", QUANT_MARKERS)
    begin, end = QUANT_MARKERS
    assert md.read_text() == f"# Accuracy\n\nreference tables\n\n{begin}\nsecond\n{end}\n"
    assert marked_section(md.read_text(), QUANT_MARKERS) == f"{begin}\nsecond\n{end}"


def test_sampler_accuracy_bench_smoke(tmp_path):
    """The sampler study on Cora: neighbour sampling and LABOR with layer dependency and κ=4, paired by seed,
    and its own section of the markdown (the rest of the file kept)."""
    shared_dataset("planetoid_cora")
    from bench.accuracy.cli import main

    out, md = tmp_path / "accuracy-sampler.json", tmp_path / "accuracy.md"
    md.write_text("# Accuracy\n\nThe reference study's part.\n")
    result = main(["--study", "sampler", "--smoke", "--host-cache-fraction", "0.25",
                   "--workdir", str(tmp_path / "work"), "--out", str(out), "--markdown", str(md)])
    saved = json.loads(out.read_text())
    assert [r["setting"] for r in saved["runs"]] == ["neighbor", "labor + layer dep., κ=4"]
    assert all(0 <= r["test_acc"] <= 1 for r in saved["runs"])
    rows = {r["setting"]: r for r in result["aggregate"]}
    assert rows["neighbor"]["delta"] == 0.0
    assert rows["labor + layer dep., κ=4"]["delta"] == pytest.approx(
        100 * (saved["runs"][1]["test_acc"] - saved["runs"][0]["test_acc"]))
    text = md.read_text()
    assert text.startswith("# Accuracy\n\nThe reference study's part.") and "Largest loss of any setting" in text
    with pytest.raises(SystemExit, match="unknown"):
        main(["--study", "sampler", "--smoke", "--settings", "labor;poisson", "--out", str(out)])


def test_precision_accuracy_bench_smoke(tmp_path):
    """The precision study on Cora: fp32 and bf16 paired by seed, in its own section of the markdown."""
    shared_dataset("planetoid_cora")
    from bench.accuracy.cli import main
    from bench.accuracy.settings import PRECISION_MARKERS

    md = tmp_path / "accuracy.md"
    md.write_text("# Accuracy\n")
    out = tmp_path / "p.json"
    main(["--study", "precision", "--smoke", "--workdir", str(tmp_path / "work"), "--out", str(out),
          "--markdown", str(md)])
    saved = json.loads(out.read_text())
    assert [r["setting"] for r in saved["runs"]] == ["fp32", "bf16"] and saved["baseline"] == "fp32"
    rows = {r["setting"]: r for r in saved["aggregate"]}
    assert rows["fp32"]["delta"] == 0.0 and abs(rows["bf16"]["delta"]) < 10
    text = md.read_text()
    assert PRECISION_MARKERS[0] in text and "| bf16 |" in text and "Largest loss of bf16" in text


def smoke_study(tmp_path, study: str) -> tuple[dict, dict, str]:
    """`bench.accuracy --study STUDY --smoke` into tmp_path: its result, the JSON it saved, the markdown it wrote
    its section into."""
    from bench.accuracy.cli import main

    md, out = tmp_path / "accuracy.md", tmp_path / f"{study}.json"
    md.write_text("# Accuracy\n")
    result = main(["--study", study, "--smoke", "--workdir", str(tmp_path / "work"), "--out", str(out),
                   "--markdown", str(md)])
    return result, json.loads(out.read_text()), md.read_text()


def test_cooperative_accuracy_bench_smoke(tmp_path):
    """The cooperative study on Cora (2 ranks under torchrun against one process, 1 seed, 3 epochs): the same
    train losses (to summation order) and test accuracy, in its own section of the markdown."""
    shared_dataset("planetoid_cora")
    from bench.accuracy.cooperative import MARKERS

    result, saved, text = smoke_study(tmp_path, "cooperative")
    assert [r["mode"] for r in saved["runs"]] == ["one process", "cooperative"]
    row = result["aggregate"][0]
    assert row["seeds"] == 1 and row["same_accuracy"] == 1 and row["delta"] == 0
    one, coop = saved["runs"]
    assert coop["train_loss"] == pytest.approx(one["train_loss"], rel=1e-4)
    assert not (tmp_path / "work" / "runs").exists() or not any((tmp_path / "work" / "runs").iterdir())
    assert MARKERS[0] in text and "| cora | 1 |" in text


def test_link_accuracy_bench_smoke(tmp_path):
    """The link study on Cora (1 seed, 3 epochs): diskgnn's --task link and the PyG reference each score the
    held-out edges of Cora's link variant, paired in the study's section of the markdown."""
    shared_dataset("planetoid_cora")
    pytest.importorskip("torch_geometric", reason="the link reference's encoder is PyG's GraphSAGE")
    from bench.accuracy.link_study import MARKERS

    result, saved, text = smoke_study(tmp_path, "link")
    assert [r["system"] for r in saved["runs"]] == ["reference", "diskgnn"]
    for r in saved["runs"]:
        assert 0 < r["mrr"] <= 1 and 0.5 < r["auc"] <= 1, r  # both learned something in 3 epochs
    row = result["aggregate"][0]
    assert row["dataset"] == "cora" and row["mrr"]["seeds"] == 1
    assert MARKERS[0] in text and "| cora | 3 | 1 | MRR |" in text and "| cora | 3 | 1 | AUC |" in text


def test_hetero_study_smoke(tmp_path):
    """The hetero study at a tiny size (HGB ACM, 1 seed, 1 epoch each): the three systems run, the table pairs
    diskgnn and the seam with the reference, the markdown section is written between its markers."""
    shared_dataset("hgb_acm")
    from bench.accuracy.cli import main
    from bench.accuracy.hetero_study import MARKERS

    out, md = tmp_path / "hetero.json", tmp_path / "accuracy.md"
    md.write_text("# Accuracy\n\nA note.\n")
    main(["--study", "hetero", "--smoke", "--workdir", str(tmp_path / "work"), "--out", str(out), "--markdown",
          str(md)])
    saved = json.loads(out.read_text())
    assert {(r["dataset"], r["system"]) for r in saved["runs"]} == {("acm", s) for s in ("reference", "diskgnn",
                                                                                       "seam")}
    for r in saved["runs"]:
        assert r["metric"] == "acc" and 0 <= r["test"] <= 1 and r["best_epoch"] == 0, r
    rows = {(a["system"], a["metric"]): a for a in saved["aggregate"]}
    assert set(rows) == {(s, m) for s in ("diskgnn", "seam") for m in ("acc", "macro_f1")}
    for a in rows.values():
        assert a["delta"] == pytest.approx(100 * (a["value"]["mean"] - a["reference"]["mean"]))
    text = md.read_text()
    assert text.startswith("# Accuracy\n\nA note.\n") and MARKERS[0] in text
    assert "| acm | diskgnn.train, out of core | 1 | acc |" in text and "| acm | PyG's loop through" in text
    # --render-only: the saved runs aggregated again, the section rewritten, nothing trained
    md.write_text("# Accuracy\n")
    main(["--study", "hetero", "--render-only", "--out", str(out), "--markdown", str(md),
          "--workdir", str(tmp_path / "work")])
    assert "| acm | PyG's loop through" in md.read_text()
