"""GLUE as GLUE scores it: MRPC and QQP by the mean of F1 and accuracy (both kept), MNLI's mismatched
dev set scored beside the matched one, the ``tokenizer`` key of ``task=glue``/``task=classify`` (a
fine-tune from a BPE pretraining), and bad keys refused in one line. Tiny GLUE-layout TSVs written
into tmp_path; in process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import IN_PROCESS, QUIET, compose_cfg
from omegaconf import OmegaConf
from torch import nn

from ablate.compose import tiny_overrides
from ablate.data import AblateDataModule, check
from ablate.components import resolve
from ablate.data.base import IGNORE
from ablate.data.encoders import train_bpe
from ablate.data.formats import CLS, PAD, SEP
from ablate.data.glue import GLUE_METRICS, GLUE_TASKS
from ablate.data.vocab import TextCodec
from ablate.finetune_plan import finetune_stage
from ablate.job import Job
from ablate.lit import AblateModule, _ranks, binary_f1, f1_accuracy, matthews_corr, pearson, spearman
from ablate.record import Metrics, Record, RecordError, Score
from ablate.planner import Planner
from ablate.run import run_job
from ablate.sweep import job_value

MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
PAIRS = [("the cat sat", "a cat was sitting"), ("it rains", "the sun shines"), ("he left", "he went away"),
         ("red car", "blue sky"), ("big dog", "a large dog"), ("cold tea", "hot soup")]


def write(path: Path, header: str, rows: list[str]) -> None:
    path.write_text("\n".join([header, *rows]) + "\n")


def task_dir(path: Path, header: str, rows: list[str], **dev: slice) -> Path:
    """A GLUE task's directory as GLUE ships it: ``train.tsv`` (all ``rows``) and each dev file
    (``dev=slice(0, 6)`` -> ``dev.tsv`` with those rows)."""
    path.mkdir()
    write(path / "train.tsv", header, rows)
    for name, part in dev.items():
        write(path / f"{name}.tsv", header, rows[part])
    return path


@pytest.fixture
def mrpc(tmp_path: Path) -> Path:
    rows = [f"{i % 2}\t{i}\t{i + 100}\t{a}\t{b}" for i, (a, b) in enumerate(PAIRS * 4)]
    return task_dir(tmp_path / "mrpc", MRPC_HEADER, rows, dev=slice(0, 6))


@pytest.fixture
def mnli(tmp_path: Path) -> Path:
    labels = ["entailment", "neutral", "contradiction"]
    rows = [f"{i}\t{a}\t{b}\t{labels[i % 3]}" for i, (a, b) in enumerate(PAIRS * 4)]
    return task_dir(tmp_path / "mnli", "index\tsentence1\tsentence2\tgold_label", rows,
                    dev_matched=slice(0, 4), dev_mismatched=slice(6, 9))


def glue(cfg: dict) -> AblateDataModule:
    dm = AblateDataModule({"_target_": "ablate.data.glue.GlueTask", "n_val": 2, "batch_size": 4, **cfg}, seed=0)
    dm.setup("fit")
    return dm


def problems(cfg: dict) -> list[str]:
    return check(*resolve("task", {"_target_": "ablate.data.glue.GlueTask", **cfg}))


# ---------------------------------------------------------------------------------------------
# the metrics, against hand-computed values

def test_f1_accuracy_is_the_mean_of_f1_and_accuracy() -> None:
    confusion = torch.tensor([[3, 1], [2, 4]])  # rows: true class, columns: predicted
    # TP 4, FP 1, FN 2: F1 = 8 / 11; accuracy = 7 / 10
    assert binary_f1(confusion) == pytest.approx(8 / 11)
    assert f1_accuracy(confusion) == pytest.approx((8 / 11 + 0.7) / 2)
    # Matthews: (c·s − Σ p·t) / sqrt((s² − Σp²)(s² − Σt²)), t = (4, 6), p = (5, 5): 20 / sqrt(50 · 48)
    assert matthews_corr(confusion) == pytest.approx(20 / (50 * 48) ** 0.5)


class Predicts(nn.Module):
    """Predicts the class written at each position (0 or 1): logits one-hot of the token."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(tokens.clamp(max=1), 2).float() * 10


def evaluate(metric: str, predicted: list[int], true: list[int]) -> dict:
    module = AblateModule(Predicts(), {}, 1, metric=metric, n_classes=2)
    tokens = torch.tensor(predicted).view(-1, 1).repeat(1, 3)
    targets = torch.full_like(tokens, IGNORE)
    targets[:, 0] = torch.tensor(true)
    return module.evaluate([(tokens, targets)])


def test_mrpc_and_qqp_record_the_mean_f1_and_accuracy_each() -> None:
    # the confusion above: 3 true negatives, 1 false positive, 2 false negatives, 4 true positives
    predicted = [0, 0, 0, 1, 0, 0, 1, 1, 1, 1]
    true = [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    e = evaluate("f1_accuracy", predicted, true)
    assert e["accuracy"] == pytest.approx((8 / 11 + 0.7) / 2)
    assert e["f1"] == pytest.approx(8 / 11) and e["label_accuracy"] == pytest.approx(0.7)
    cola = evaluate("matthews_corr", predicted, true)
    assert cola["accuracy"] == pytest.approx(20 / (50 * 48) ** 0.5) and "f1" not in cola
    plain = evaluate("accuracy", predicted, true)
    assert plain["accuracy"] == pytest.approx(0.7) and "f1" not in plain and "label_accuracy" not in plain


# ---------------------------------------------------------------------------------------------
# the tasks

def test_mrpc_and_qqp_score_as_glue_does(mrpc: Path, tmp_path: Path) -> None:
    dm = glue({"name": "mrpc", "path": str(mrpc), "seq_len": 32})
    assert dm.metric == "f1_accuracy" and dm.n_classes == 2 and dm.task.labels == ["0", "1"]
    x, y = dm.eval_batches(32)[0]
    assert y[:, 0].tolist() == [0, 1, 0, 1]
    assert x[0].tolist()[:1 + len("the cat sat") + 1] == [CLS, *b"the cat sat", SEP]
    qqp = tmp_path / "qqp"
    qqp.mkdir()
    rows = [f"{i}\t{i}\t{i + 1}\t{a}\t{b}\t{i % 2}" for i, (a, b) in enumerate(PAIRS * 4)]
    for name in ("train.tsv", "dev.tsv"):
        write(qqp / name, "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", rows)
    dm = glue({"name": "qqp", "path": str(qqp), "seq_len": 32})
    assert dm.metric == "f1_accuracy" and dm.eval_batches(32)[0][1][:, 0].tolist() == [0, 1, 0, 1]
    assert {n: GLUE_METRICS.get(n, "accuracy") for n in GLUE_TASKS} == {
        "cola": "matthews_corr", "sst2": "accuracy", "mrpc": "f1_accuracy", "stsb": "pearson_spearman",
        "qqp": "f1_accuracy",
        "mnli": "accuracy", "qnli": "accuracy", "rte": "accuracy", "wnli": "accuracy"}


def test_mnli_scores_mismatched_beside_matched(mnli: Path) -> None:
    dm = glue({"name": "mnli", "path": str(mnli), "seq_len": 48})
    assert dm.task.labels == ["contradiction", "entailment", "neutral"]
    assert dm.eval_batches(48)[0][1][:, 0].tolist() == [1, 2, 0, 1]  # the test split: dev_matched.tsv
    (batches,) = dm.task.extra_test_sets().values()
    assert list(dm.task.extra_test_sets()) == ["mismatched"]
    assert batches[0][1][:, 0].tolist() == [1, 2, 0]  # dev_mismatched.tsv's rows 6..8
    (mnli / "dev_mismatched.tsv").unlink()  # a directory without it: matched only
    assert glue({"name": "mnli", "path": str(mnli), "seq_len": 48}).task.extra_test_sets() == {}


def test_mnli_mismatched_is_recorded(mnli: Path, tmp_path: Path, one_thread) -> None:
    overrides = ["task=glue", "task.name=mnli", f"task.path={mnli}", "task.n_val=2", "trainer.max_steps=2"]
    cfg = compose_cfg(tiny_overrides(*IN_PROCESS, *overrides))
    record = run_job(cfg, Job(tmp_path / "job", overrides, {}, None, None))
    assert record.status == "ok", record.error
    mismatched = record.metrics.eval_extra["mismatched"]
    assert mismatched.count == 3 and 0 <= mismatched.accuracy <= 1 and mismatched.loss > 0
    again = Record.read(record.write(tmp_path / "job"))
    assert again.metrics.eval_extra == record.metrics.eval_extra


def test_old_records_read_without_the_new_fields() -> None:
    old = Record.from_json({"status": "ok", "metrics": {"metric": "f1", "accuracy": 0.5,
                                                        "eval": {"16": {"accuracy": 0.5, "loss": 0.7}}}})
    assert old.metrics.eval_extra == {} and old.metrics.eval["16"].f1 is None
    new = Record(status="ok", metrics=Metrics(metric="f1_accuracy", accuracy=0.7,
                                              eval={"16": Score(0.7, 0.6, 10, 0.7, 0.7)},
                                              eval_extra={"mismatched": Score(0.4, 1.0, 3)}))
    assert Record.from_json(new.to_json()).metrics == new.metrics
    implausible = new.to_json()
    implausible["metrics"]["eval_extra"]["mismatched"]["accuracy"] = 1.5
    with pytest.raises(RecordError, match=r"metrics.eval_extra.mismatched.accuracy=1.5"):
        Record.from_json(implausible)


# ---------------------------------------------------------------------------------------------
# STS-B: a regression

STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


@pytest.fixture
def stsb(tmp_path: Path) -> Path:
    rows = [f"{i}\tnews\tf\t2012\t{i}\tx\ty\t{a}\t{b}\t{i % 6 * 0.8:.3f}" for i, (a, b) in enumerate(PAIRS * 4)]
    return task_dir(tmp_path / "stsb", STSB_HEADER, rows, dev=slice(0, 5))


def test_pearson_and_spearman_against_hand_computed_values() -> None:
    x, y = torch.tensor([1.0, 2, 3, 4]), torch.tensor([1.0, 3, 2, 4])
    # centred: (-1.5, -0.5, 0.5, 1.5) and (-1.5, 0.5, -0.5, 1.5): 4 / sqrt(5 · 5)
    assert pearson(x, y) == pytest.approx(0.8) and spearman(x, y) == pytest.approx(0.8)
    squares = torch.tensor([1.0, 4, 9, 100])  # monotone, not linear: Spearman 1, Pearson below
    assert spearman(x, squares) == pytest.approx(1.0) and pearson(x, squares) < 0.9
    assert _ranks(torch.tensor([3.0, 1, 1, 2])).tolist() == [3, 0.5, 0.5, 2]  # ties share their mean rank
    assert pearson(x, torch.ones(4)) == 0.0


class Scores(nn.Module):
    """Outputs the token as its score."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.float().unsqueeze(-1)


def test_stsb_scores_the_mean_of_pearson_and_spearman() -> None:
    module = AblateModule(Scores(), {}, 1, metric="pearson_spearman", n_classes=1)
    tokens = torch.tensor([1, 2, 3, 4]).view(-1, 1).repeat(1, 2)
    targets = torch.full(tokens.shape, float(IGNORE))
    targets[:, 0] = torch.tensor([1.0, 3, 2, 4])
    e = module.evaluate([(tokens[:2], targets[:2]), (tokens[2:], targets[2:])])
    assert e["accuracy"] == pytest.approx(0.8) and e["pearson"] == pytest.approx(0.8)
    assert e["spearman"] == pytest.approx(0.8) and e["count"] == 4
    assert e["loss"] == pytest.approx((0 + 1 + 1 + 0) / 4)  # mean squared error
    assert "label_accuracy" not in e


def test_stsb_reads_scores_and_trains_a_one_output_head(stsb: Path, tmp_path: Path, one_thread) -> None:
    dm = glue({"name": "stsb", "path": str(stsb), "seq_len": 32})
    assert dm.metric == "pearson_spearman" and dm.n_classes == 1
    _, y = dm.eval_batches(32)[0]
    assert y.dtype == torch.float32 and y[:, 0].tolist() == pytest.approx([0, 0.8, 1.6, 2.4])
    assert (y[:, 1:] == IGNORE).all()
    overrides = ["task=glue", "task.name=stsb", f"task.path={stsb}", "task.n_val=2", "trainer.max_steps=2"]
    cfg = compose_cfg(tiny_overrides(*IN_PROCESS, *overrides))
    record = run_job(cfg, Job(tmp_path / "job", overrides, {}, None, None))
    assert record.status == "ok", record.error
    score = record.metrics.eval["16"]
    assert record.metrics.metric == "pearson_spearman" and record.metrics.accuracy == score.accuracy
    assert score.accuracy == pytest.approx((score.pearson + score.spearman) / 2) and score.loss > 0
    assert Record.read(record.write(tmp_path / "job")).metrics == record.metrics


def test_a_score_that_is_no_number_is_refused(stsb: Path) -> None:
    text = (stsb / "dev.tsv").read_text().replace("\t0.800\n", "\tsimilar\n")
    (stsb / "dev.tsv").write_text(text)
    with pytest.raises(ValueError, match=r"dev.tsv, line 3: label 'similar' is not a number"):
        glue({"name": "stsb", "path": str(stsb), "seq_len": 32})


# ---------------------------------------------------------------------------------------------
# the tokenizer key

@pytest.fixture
def bpe(tmp_path: Path) -> str:
    path = tmp_path / "tokenizer.json"
    train_bpe([f"{a} {b}" for a, b in PAIRS] * 20, 300).save(str(path))
    return str(path)


def test_bytes_keep_todays_ids_and_the_byte_pretrainings_vocabulary(mrpc: Path) -> None:
    dm = glue({"name": "mrpc", "path": str(mrpc), "seq_len": 32, "tokenizer": "bytes"})
    assert dm.vocab_size == 259 and dm.pad_id == PAD
    assert dm.task.codec.fingerprint == TextCodec.of("bytes").fingerprint
    x, _ = dm.eval_batches(32)[0]
    assert x[0].tolist()[:5] == [CLS, *b"the "] and x[0, -1] == PAD


def test_a_tokenizer_file_encodes_through_its_codec(mrpc: Path, bpe: str, tmp_path: Path) -> None:
    codec = TextCodec.of(bpe, specials=True)
    dm = glue({"name": "mrpc", "path": str(mrpc), "seq_len": 32, "tokenizer": bpe})
    assert dm.vocab_size == codec.vocab_size and dm.pad_id == codec.pad_id
    assert dm.task.codec.fingerprint == codec.fingerprint
    x, y = dm.eval_batches(32)[0]
    a, b = codec.encode(PAIRS[0][0]), codec.encode(PAIRS[0][1])
    assert x[0].tolist()[:len(a) + len(b) + 3] == [codec.cls_id, *a, codec.sep_id, *b, codec.sep_id]
    assert x[0, -1] == codec.pad_id and y[0, 0] == 0
    causal = glue({"name": "mrpc", "path": str(mrpc), "seq_len": 32, "tokenizer": bpe, "causal": True})
    x, y = causal.eval_batches(32)[0]
    n = len(a) + len(b) + 2
    assert x[0].tolist()[:n] == [*a, codec.sep_id, *b, codec.cls_id] and y[0, n - 1] == 0
    short = glue({"name": "mrpc", "path": str(mrpc), "seq_len": 6, "tokenizer": bpe})
    assert (short.eval_batches(6)[0][0] == codec.sep_id).sum(1).tolist() == [2, 2, 2, 2]  # truncated, both kept
    classify = AblateDataModule({"_target_": "ablate.data.files.Classify", "path": str(mrpc), "seq_len": 32,
                                 "n_val": 2, "batch_size": 4, "tokenizer": bpe}, seed=0)
    classify.setup("fit")
    assert torch.equal(classify.eval_batches(32)[0][0], dm.eval_batches(32)[0][0])


def _finetune_jobs(arguments: list[str]) -> list:
    """The fine-tune stage's jobs of the sweep ``arguments`` describe, as the planner lays them out."""
    def compose(job: list[str]):
        cfg = compose_cfg(job)
        return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])

    return finetune_stage(Planner(compose_cfg(arguments, hydra_config=True), compose, arguments=arguments).plan())


PRETRAINING = ["seed=0", *tiny_overrides(*QUIET, "task=mlm", "task.seq_len=32", "task.tokenizer=bpe", "task.vocab_size=300")]


def test_the_fine_tune_stage_gives_glue_the_pretraining_tokenizer(mrpc: Path) -> None:
    (job,) = _finetune_jobs([*PRETRAINING, "finetune.tasks=[glue]", "+finetune.settings.glue.name=mrpc",
                             f"+finetune.settings.glue.path={mrpc}", "finetune.seq_len=32"])
    tokenizer = job_value(job, "task.tokenizer").strip("'\"")
    assert tokenizer.endswith(".json") and job_value(job, "task.name") == "mrpc"
    assert glue({"name": "mrpc", "path": str(mrpc), "seq_len": 32, "tokenizer": tokenizer}).vocab_size == 300 + 4


def test_one_fine_tune_stage_runs_several_glue_tasks(mrpc: Path, stsb: Path, mnli: Path) -> None:
    """Each GLUE task is an option of its own (conf/task/glue_<name>.yaml: task=glue, its name set), so
    finetune.tasks lists several, each with its own data, steps and rate."""
    jobs = _finetune_jobs([*PRETRAINING, "finetune.tasks=[glue_mrpc,glue_stsb,glue_mnli]", "finetune.seq_len=32",
                           f"+finetune.settings.glue_mrpc.path={mrpc}", f"+finetune.settings.glue_stsb.path={stsb}",
                           f"+finetune.settings.glue_mnli.path={mnli}", "+finetune.per_task.glue_stsb.steps=7"])
    by_task = {job_value(job, "task"): job for job in jobs}
    assert list(by_task) == ["glue_mrpc", "glue_stsb", "glue_mnli"]
    paths = {"glue_mrpc": mrpc, "glue_stsb": stsb, "glue_mnli": mnli}
    for option, job in by_task.items():
        cfg = compose_cfg(job)
        assert cfg.task.name == option.removeprefix("glue_") and cfg.task.path == str(paths[option])
        assert cfg.task.tokenizer.endswith(".json") and cfg.trainer.max_steps == (7 if option == "glue_stsb" else 200)
    assert compose_cfg(by_task["glue_stsb"]).task._target_ == "ablate.data.glue.GlueTask"


# ---------------------------------------------------------------------------------------------
# bad keys, one line each

def test_bad_keys_are_refused_in_one_line(mrpc: Path) -> None:
    (bad,) = problems({"name": "mrpc", "path": str(mrpc), "seq_len": 32, "tokenizer": "bpe"})
    assert "task.tokenizer='bpe'" in bad and "valid: bytes, or the path of a tokenizer.json" in bad
    (bad,) = problems({"name": "mrpc", "path": str(mrpc), "seq_len": 32, "tokenizer": "nope.json"})
    assert "task.tokenizer='nope.json' is not a tokenizer file" in bad and "\n" not in bad
    (bad,) = problems({"name": "mnli_mismatched", "seq_len": 32})
    assert "task.name='mnli_mismatched' is not a GLUE task; valid: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli" \
        in bad
    with pytest.raises(ValueError, match="task.tokenizer='bpe'"):
        glue({"name": "mrpc", "path": str(mrpc), "seq_len": 32, "tokenizer": "bpe"})
