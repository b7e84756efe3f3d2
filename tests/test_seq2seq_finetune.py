"""The fine-tune stage after a span-corruption pretraining (docs/finetune.md, docs/seq2seq.md): span
corruption shares the downstream tasks' vocabulary; a prefix LM and an encoder–decoder fine-tune on a
downstream task's whole row (the encoder–decoder as BART, Lewis et al. 2020, §3.1), from every
pretrained weight but the head; FLOPs, the plan, the refusals, and one real sweep that ends in the
fine-tune table."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from conftest import QUIET, compose_cfg, records, run_cli
from test_finetune import plan_of

from ablate.compose import tiny_overrides
from ablate.config import config_problems
from ablate.data import build_task
from ablate.finetune import downstream_codec, load_pretrained, save_pretrained
from ablate.finetune_plan import finetune_stage
from ablate.lit import train_step
from ablate.model import build_model
from ablate.model.seq2seq import SEQ2SEQ_ARCHS, EncoderDecoder, memory_padding_mask
from ablate.optim import make_optimizer
from ablate.planner import SweepError
from ablate.preview import preview
from ablate.sweep import job_value
from ablate.train import build

#: the pretraining: span corruption at length 32
PRETRAINING = tiny_overrides(*QUIET, "task=span_corruption", "task.seq_len=32")
#: a fine-tune job as the stage composes it: py_module in the causal layout (the label at the row's CLS, last)
FINE_TUNE = tiny_overrides(*QUIET, "task=py_module", "task.seq_len=32", "task.causal=true", "finetune.from_job=x")


def _pretrained(tmp_path: Path, arch: str):
    """A briefly trained span-corruption model of ``arch`` (plain PyTorch steps), saved as a pretraining's."""
    cfg = compose_cfg([*PRETRAINING, f"model.arch={arch}", "model.n_layers=2", "finetune.tasks=[py_module]"])
    data, model, _ = build(cfg)
    optimizer = make_optimizer(model.parameters(), {**cfg.optim, "lr": 3e-3})
    for _, batch in zip(range(2), data.train_dataloader()):
        train_step(model, optimizer, batch)
    path, sha = save_pretrained(tmp_path, model, data.task.codec())
    return load_pretrained(path, sha)


def _fine_tuned_rows(tmp_path: Path, arch: str):
    """A fine-tune model of ``arch`` (built from its span-corruption pretraining, in eval mode), the pad
    id, two rows of the causal layout (``text CLS PAD...``: one short, one that fills the row), and
    the same rows with the token at column 10 changed."""
    data, model, _ = build(compose_cfg([*FINE_TUNE, f"model.arch={arch}", "model.n_layers=2"]),
                           _pretrained(tmp_path, arch))
    codec, rows = data.task.codec, []
    for text in ("def f(x): return x", "import os\nprint(os.getcwd(), os.sep)"):
        ids = codec.encode(text)[:31] + [codec.cls_id]
        rows.append(ids + [codec.pad_id] * (32 - len(ids)))
    tokens = torch.tensor(rows)
    later = tokens.clone()
    later[:, 10] = ord("Z")
    return model.eval(), data.pad_id, tokens, later


def _padding_is_masked(model, pad_id: int, tokens: torch.Tensor) -> None:
    """The pad row of the embedding changes no real position's output."""
    real, full = tokens.ne(pad_id), model(tokens)
    model.tok_emb.weight[pad_id] += 3.0
    torch.testing.assert_close(model(tokens)[real], full[real], atol=1e-5, rtol=1e-4)


def test_span_corruption_ids_begin_with_the_downstream_vocabulary() -> None:
    task = build_task(compose_cfg(PRETRAINING).task)
    downstream = build_task(compose_cfg(FINE_TUNE).task)
    codec = task.codec()
    assert codec.fingerprint == downstream_codec(downstream).fingerprint
    assert (task.pad_id, task.sep_id) == (codec.pad_id, codec.sep_id) == (256, 258)
    assert (task.eos_id, task.sentinel_id, task.vocab_size) == (260, 261, 261 + task.N_SENTINELS)
    assert downstream.vocab_size == 260 < task.vocab_size  # every downstream id is a pretrained row


@pytest.mark.parametrize("arch", SEQ2SEQ_ARCHS)
def test_a_fine_tune_starts_from_every_span_corruption_weight_but_the_head(tmp_path: Path, arch: str) -> None:
    pretrained = _pretrained(tmp_path, arch)
    cfg = compose_cfg([*FINE_TUNE, f"model.arch={arch}", "model.n_layers=2"])
    assert config_problems(cfg) == []
    data, model, _ = build(cfg, pretrained)
    state = model.state_dict()
    assert set(state) == set(pretrained.state)  # the same modules: none left out, none new
    body = [k for k in state if not k.startswith("head.")]
    for key in body:
        assert torch.equal(state[key], pretrained.state[key]), key
    if arch == "encoder_decoder":
        assert any(k.startswith("encoder.") for k in body) and any(".cross." in k for k in body)
    assert model.layout is None and model.tok_emb.num_embeddings == 261 + 64
    assert model.head.out_features == data.n_classes == 6 != pretrained.state["head.weight"].shape[0]
    tokens, targets = next(iter(data.train_dataloader()))
    assert model(tokens).shape == (*tokens.shape, 6)  # the head on every position; the label where the task puts it


def test_the_encoder_decoder_reads_the_row_in_both_stacks_its_decoder_causally(tmp_path: Path) -> None:
    model, pad_id, tokens, later = _fine_tuned_rows(tmp_path, "encoder_decoder")
    with torch.no_grad():
        memory, mask = model.encode(tokens), memory_padding_mask(tokens, pad_id)
        decoded, decoded_later = model.decode(tokens, memory, mask), model.decode(later, memory, mask)
        # the decoder is causal: its states before the change are the same, from the change on they differ
        torch.testing.assert_close(decoded_later[:, :10], decoded[:, :10])
        assert not torch.allclose(decoded_later[:, 10], decoded[:, 10])
        # the encoder reads the whole row, and through cross-attention so does every decoder position
        assert not torch.allclose(model.encode(later)[:, 5], memory[:, 5])
        assert not torch.allclose(model(later)[:, 5], model(tokens)[:, 5])
        torch.testing.assert_close(model(tokens), decoded)  # forward: the same row into both stacks
        _padding_is_masked(model, pad_id, tokens)


def test_the_prefix_lm_reads_the_whole_row_as_its_prefix(tmp_path: Path) -> None:
    model, pad_id, tokens, later = _fine_tuned_rows(tmp_path, "prefix_lm")
    with torch.no_grad():
        assert not torch.allclose(model(later)[:, 5], model(tokens)[:, 5])  # bidirectional: an earlier position sees it
        _padding_is_masked(model, pad_id, tokens)


def test_an_encoder_decoder_on_a_downstream_row_costs_both_stacks_over_the_row() -> None:
    cfg = compose_cfg([*FINE_TUNE, "model.arch=encoder_decoder"])
    decoder_cfg = compose_cfg([*FINE_TUNE, "model.arch=decoder"])
    enc_dec, decoder = (build_model(c, 260, 6, 32, 256) for c in (cfg, decoder_cfg))
    assert isinstance(enc_dec, EncoderDecoder) and enc_dec.layout is None
    ours, theirs = enc_dec.flops_by_component(32), decoder.flops_by_component(32)
    assert ours["attention"] == 2 * theirs["attention"] and ours["ffn"] == 2 * theirs["ffn"]  # every token, twice
    assert ours["cross_attention"] > 0 and ours["head"] == theirs["head"]  # one head, on the decoder's states


def test_pretraining_needs_a_seq2seq_task_and_a_fine_tune_on_a_language_model_is_refused() -> None:
    for arch in SEQ2SEQ_ARCHS:
        refused = config_problems(compose_cfg(tiny_overrides(*QUIET, "task=py_module", f"model.arch={arch}")))
        assert any(p.startswith(f"model.arch={arch} reads a source and a target") for p in refused), refused
        assert config_problems(compose_cfg([*FINE_TUNE, f"model.arch={arch}"])) == []
    refused = config_problems(compose_cfg(tiny_overrides(*QUIET, "model.arch=encoder_decoder", "finetune.from_job=x")))
    assert any("sees the next token it is to predict; valid: auto, decoder" in p for p in refused), refused


def test_the_plan_pretrains_each_family_by_span_corruption_then_fine_tunes_it_on_the_causal_layout(
        tmp_path: Path) -> None:
    planner, plan = plan_of(["model.arch=encoder_decoder,prefix_lm,decoder", "finetune.tasks=[py_module]",
                             "finetune.steps=4", "finetune.seq_len=32", *PRETRAINING])
    stage = finetune_stage(plan)
    assert [job_value(j, "model.arch") for j in stage] == ["encoder_decoder", "prefix_lm", "decoder"]
    assert all(job_value(j, "task") == "py_module" and job_value(j, "task.causal") == "true" for j in stage)
    shown = preview(planner, plan, tmp_path, time_steps=False)
    flops = {job.variant: job.flops for job in shown.jobs}
    assert flops["model.arch=encoder_decoder -> py_module"] > 1.5 * flops["model.arch=decoder -> py_module"]


def test_a_pretraining_without_a_shared_vocabulary_names_the_family_s_objective() -> None:
    with pytest.raises(SweepError) as refused:
        plan_of(["model.arch=encoder_decoder", "finetune.tasks=[py_module]", "finetune.seq_len=32",
                 *tiny_overrides(*QUIET, "task=add")])
    message = str(refused.value)
    assert "the pretraining task is task=add" in message and "\n" not in message
    assert "pretrain model.arch=encoder_decoder with task=span_corruption" in message


@pytest.mark.slow
def test_a_span_corruption_sweep_fine_tunes_each_family_and_ends_in_the_fine_tune_table(
        tmp_path: Path, tiny: list[str]) -> None:
    sweep = tmp_path / "sweep"
    args = ["-m", "task=span_corruption", "model.arch=encoder_decoder,prefix_lm", "finetune.tasks=[py_module]",
            "finetune.steps=4", "finetune.seq_len=32", *tiny, "task.seq_len=32", "task.n_test=16", "task.n_val=8",
            "logger=none", "eval.every=0", "measure.memory=false", f"hydra.sweep.dir={sweep}"]
    out = run_cli(args, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    by_task = {(r["config"]["task"]["name"], r["config"]["model"]["arch"]): r for r in records(sweep)}
    assert set(by_task) == {(task, arch) for task in ("span_corruption", "py_module") for arch in SEQ2SEQ_ARCHS}
    assert all(r["status"] == "ok" for r in by_task.values())
    for arch in SEQ2SEQ_ARCHS:
        fine_tune = by_task["py_module", arch]
        assert fine_tune["finetune"]["from_variant"] == f"model.arch={arch}"
        assert fine_tune["finetune"]["sha256"] == by_task["span_corruption", arch]["finetune"]["sha256"]
        assert fine_tune["metrics"]["metric"] == "accuracy" and fine_tune["metrics"]["flops_per_token"] > 0
    with (sweep / "table.csv").open() as f:
        rows = {row["variant"]: row for row in csv.DictReader(f)}
    assert list(rows) == ["encoder_decoder", "prefix_lm"]  # the command line's order
    assert all(row["py_module"] != "" and row["finetune_status"] == "1 ok" for row in rows.values())


def test_tied_embeddings_with_a_fine_tune_stage_are_refused_before_anything_trains() -> None:
    """A downstream head predicts classes, not tokens: tying it to the token table failed inside the
    fine-tune job, after the pretraining had trained (the config's dry run ties a 2-token table to
    2 outputs, which fits). Now the pretraining's config is refused, and a fine-tune job's too."""
    for overrides in (["task=lm", "finetune.tasks=[py_module]"], ["task=py_module", "finetune.from_job=x"]):
        refused = config_problems(compose_cfg(tiny_overrides(*QUIET, *overrides, "model.tie_embeddings=true")))
        assert any(p.startswith("model.tie_embeddings=true with a fine-tune stage") for p in refused), refused
    assert config_problems(compose_cfg(tiny_overrides(*QUIET, "task=lm", "model.tie_embeddings=true"))) == []
