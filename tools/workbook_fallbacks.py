"""Cells after an exercise use the learner's function once written, the course's until then.

    python tools/workbook_fallbacks.py [NOTEBOOKS]           # apply (default: notebooks/)
    python tools/workbook_fallbacks.py --check [NOTEBOOKS]   # exit 1 if an edit is still to do

Issue 25, "a workbook that runs to the end": in a learner's copy, Run All must reach the
last cell before every exercise is solved. A cell after an exercise that calls the
learner's function calls it through ``checks.yours_or_reference(exercise, fn)`` (the
exercise's name as its check cell spells it): the learner's function once it is written,
the exercise's reference with a one-line note until then. The learner's own name is never
rebound (the grader records the learner's function later): the cell calls the returned
function directly or binds it to a name of its own (``softmax_fn``). With the solution
written, nothing changes — the instructor notebook's outputs stay the same.

Every edit is an exact replacement of text in one code cell, found by a snippet (``anchor``)
that occurs in exactly one code cell of its lesson; ``old`` must occur exactly once in it.
An edit whose ``new`` text is already there is skipped, so the script can be run again, and
applied to a copy of the lessons whose markdown or metadata changed meanwhile. Only code
cells' ``source`` is touched; the file is written back in nbformat's own JSON layout
(indent 1, UTF-8), and outputs are left as they are — re-execute the changed lessons
(tools/execute_notebooks.py) afterwards.

Standard library only.
"""

# The edits quote lesson lines verbatim, some longer than the line limit.
# ruff: noqa: E501

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LATER = "until then the course's version"


def yours(exercise: str, fn: str) -> str:
    """The call that gives the learner's ``fn`` once written, else the exercise's reference."""
    return f'checks.yours_or_reference("{exercise}", {fn})'


def note(fn: str, plural: bool = False) -> str:
    """The comment line that says what the cell uses."""
    if plural:
        return f"# your {fn} once they are written; until then the course's versions\n"
    return f"# your {fn} once it is written; {LATER}\n"


@dataclass(frozen=True)
class Edit:
    lesson: str  # file name in the notebooks folder
    anchor: str  # a snippet found in exactly one code cell of the lesson
    old: str
    new: str


EDITS: tuple[Edit, ...] = (
    # ---- 01 relevance ---------------------------------------------------------------------
    Edit(
        "01_relevance.ipynb",
        "assert np.array_equal(scores_chase, K @ q_chase)",
        "scores_chase = relevance_scores(q_chase, K)             # (seq_k,)\n",
        note("relevance_scores")
        + f"scores_chase = {yours('relevance_scores', 'relevance_scores')}(q_chase, K)  # (seq_k,)\n",
    ),
    Edit(
        "01_relevance.ipynb",
        "S_loops = np.zeros((seq_q, seq_k))",
        "S = score_matrix(Q, K)                 # (seq_q, seq_k)\n",
        note("score_matrix")
        + f"S = {yours('score_matrix', 'score_matrix')}(Q, K)  # (seq_q, seq_k)\n",
    ),
    # ---- 02 projections -------------------------------------------------------------------
    Edit(
        "02_projections.ipynb",
        'for name, arr in [("q", q), ("k", k), ("v", v)]:',
        "q, k, v = project(x, W_q, W_k, W_v)  # (seq, d_k), (seq, d_k), (seq, d_v)\n",
        note("project")
        + f"q, k, v = {yours('project', 'project')}(x, W_q, W_k, W_v)  # (seq, d_k), (seq, d_k), (seq, d_v)\n",
    ),
    Edit(
        "02_projections.ipynb",
        "x_changed = x.copy()",
        "q_changed, _, _ = project(x_changed, W_q, W_k, W_v)\n",
        f"q_changed, _, _ = {yours('project', 'project')}(x_changed, W_q, W_k, W_v)  # yours once written\n",
    ),
    Edit(
        "02_projections.ipynb",
        "oracle = fresh(torch.from_numpy(x))",
        "mine = linear_forward(x, weight, bias)\n",
        note("linear_forward")
        + f"mine = {yours('linear_forward', 'linear_forward')}(x, weight, bias)\n",
    ),
    Edit(
        "02_projections.ipynb",
        'axes_k = ["noun", "verb", "modifier"]',
        "q_h, k_h, _ = project(x, W_q_hand, W_k_hand, W_v)  # (seq, d_k) each\n",
        note("project")
        + f"q_h, k_h, _ = {yours('project', 'project')}(x, W_q_hand, W_k_hand, W_v)  # (seq, d_k) each\n",
    ),
    # ---- 03 attention ---------------------------------------------------------------------
    Edit(
        "03_attention.ipynb",
        'print("softmax agrees with attnlib.softmax")',
        "assert np.allclose(softmax(scores), attnlib.softmax(scores))\n"
        "assert np.allclose(softmax(big), attnlib.softmax(big))\n",
        note("softmax") + f"softmax_fn = {yours('softmax', 'softmax')}\n"
        "assert np.allclose(softmax_fn(scores), attnlib.softmax(scores))\n"
        "assert np.allclose(softmax_fn(big), attnlib.softmax(big))\n",
    ),
    Edit(
        "03_attention.ipynb",
        "top2 = sorted(tokens[j] for j in np.argsort(weights[i_chase])[-2:])",
        "weights = softmax(scores)  # (seq_q, seq_k), rows are queries\n",
        note("softmax")
        + f"weights = {yours('softmax', 'softmax')}(scores)  # (seq_q, seq_k), rows are queries\n",
    ),
    Edit(
        "03_attention.ipynb",
        "def weights_for_angle(angle_deg):",
        "def weights_for_angle(angle_deg):\n",
        note("softmax")
        + f"softmax_fn = {yours('softmax', 'softmax')}\n\n\ndef weights_for_angle(angle_deg):\n",
    ),
    Edit(
        "03_attention.ipynb",
        "def weights_for_angle(angle_deg):",
        "    return softmax(q_dir @ k.T / np.sqrt(d_k))  # (seq_k,)\n",
        "    return softmax_fn(q_dir @ k.T / np.sqrt(d_k))  # (seq_k,)\n",
    ),
    # The course's softmax already gives an empty row weights 0 (the rule `attend` has to
    # follow), so until the learner's softmax is written the nan is shown on the shift
    # itself, and the learner's row of nan is asserted once their softmax is there.
    Edit(
        "03_attention.ipynb",
        'mask[tokens.index("small")] = False',
        'with np.errstate(invalid="ignore"):  # -inf - (-inf) is nan: silence the warning, see the row\n'
        "    plain = softmax(blocked)\n"
        "print(plain)\n"
        "others = [i for i in range(seq) if i != 4]\n"
        "assert np.isnan(plain[4]).all()  # the query with no allowed key: nan\n",
        "# your softmax once it is written; until then the course's version, which already\n"
        "# gives the empty row 0 (the rule below): the nan is then seen on the shift itself\n"
        f"softmax_fn = {yours('softmax', 'softmax')}\n"
        'with np.errstate(invalid="ignore"):  # -inf - (-inf) is nan: silence the warning, see the row\n'
        "    plain = softmax_fn(blocked)\n"
        "    row_shift = blocked - blocked.max(axis=-1, keepdims=True)  # a stable softmax's first step\n"
        "print(plain)\n"
        "others = [i for i in range(seq) if i != 4]\n"
        "assert np.isnan(row_shift[4]).all()  # the query with no allowed key: -inf - (-inf) = nan\n"
        "if softmax_fn is softmax:\n"
        "    assert np.isnan(plain[4]).all()  # and your softmax passes it on: a row of nan\n",
    ),
    Edit(
        "03_attention.ipynb",
        "print(masked_weights)",
        "masked_out, masked_weights = attend(q, k, v, mask=mask)\n",
        note("attend") + f"attend_fn = {yours('attend', 'attend')}\n"
        "masked_out, masked_weights = attend_fn(q, k, v, mask=mask)\n",
    ),
    Edit(
        "03_attention.ipynb",
        "print(masked_weights)",
        "    out_mine, w_mine = attend(q, k, v, mask=m_)\n",
        "    out_mine, w_mine = attend_fn(q, k, v, mask=m_)\n",
    ),
    Edit(
        "03_attention.ipynb",
        "print(masked_weights)",
        "assert np.allclose(attend(q, k, v)[0], out)",
        "assert np.allclose(attend_fn(q, k, v)[0], out)",
    ),
    # ---- 04 scaling -----------------------------------------------------------------------
    Edit(
        "04_scaling.ipynb",
        "N_INIT = 4000",
        "for d_k in (64, 256):\n    torch.manual_seed(d_k)\n",
        note("score_variance") + f"variance_fn = {yours('score_variance', 'score_variance')}\n"
        "for d_k in (64, 256):\n    torch.manual_seed(d_k)\n",
    ),
    Edit(
        "04_scaling.ipynb",
        "N_INIT = 4000",
        "    predicted = score_variance(d_k, ",
        "    predicted = variance_fn(d_k, ",
    ),
    Edit(
        "04_scaling.ipynb",
        "c·√d_k varies by a factor",
        "rows = []\nfor i, d_k in enumerate([16, 64, 256, 1024]):\n",
        note("choose_scale") + f"choose_fn = {yours('choose_scale', 'choose_scale')}\n"
        "rows = []\nfor i, d_k in enumerate([16, 64, 256, 1024]):\n",
    ),
    Edit(
        "04_scaling.ipynb",
        "c·√d_k varies by a factor",
        "    c = choose_scale(raw_rows, 2.5)\n",
        "    c = choose_fn(raw_rows, 2.5)\n",
    ),
    # ---- 05 keys vs values ----------------------------------------------------------------
    Edit(
        "05_keys_vs_values.ipynb",
        'print("lookup_batch agrees with attnlib.tasks.lookup")',
        "mine = lookup_batch(example.names.numpy(),",
        note("lookup_batch")
        + f"mine = {yours('lookup_batch', 'lookup_batch')}(example.names.numpy(),",
    ),
    # ---- 06 learning keys -----------------------------------------------------------------
    Edit(
        "06_learning_keys.ipynb",
        "out_t.backward(torch.as_tensor(d_out_np))",
        "mine = attention_backward(q_np, k_np, v_np, d_out_np)\n",
        note("attention_backward")
        + f"mine = {yours('attention_backward', 'attention_backward')}(q_np, k_np, v_np, d_out_np)\n",
    ),
    Edit(
        "06_learning_keys.ipynb",
        "class MyAttention(torch.autograd.Function):",
        "class MyAttention(torch.autograd.Function):\n",
        note("attention_backward")
        + f"backward_fn = {yours('attention_backward', 'attention_backward')}\n\n\n"
        "class MyAttention(torch.autograd.Function):\n",
    ),
    Edit(
        "06_learning_keys.ipynb",
        "class MyAttention(torch.autograd.Function):",
        "for g in attention_backward(q, k, v, d_out.numpy()))",
        "for g in backward_fn(q, k, v, d_out.numpy()))",
    ),
    Edit(
        "06_learning_keys.ipynb",
        "lib = BP.projection_grads(x_q, x_kv, *(W.T for W in Ws), d_out)",
        "by_hand = weight_grads(x_q, x_kv, *Ws, d_out)\n",
        note("weight_grads")
        + f"by_hand = {yours('weight_grads', 'weight_grads')}(x_q, x_kv, *Ws, d_out)\n",
    ),
    Edit(
        "06_learning_keys.ipynb",
        "parts = unpack_mha(mha)",
        "mine = weight_grads(x_q, x_kv, *(W.detach()",
        note("weight_grads")
        + f"mine = {yours('weight_grads', 'weight_grads')}(x_q, x_kv, *(W.detach()",
    ),
    # ---- 07 multi-head --------------------------------------------------------------------
    Edit(
        "07_multi_head.ipynb",
        "came_from_right = (right[0, 1] // 10).astype(int)",
        "right = split_heads(x, n_heads)  # (batch, n_heads, seq, d_head)\n",
        note("split_heads and merge_heads", plural=True)
        + f"split_fn = {yours('split_heads', 'split_heads')}\n"
        f"merge_fn = {yours('merge_heads', 'merge_heads')}\n"
        "right = split_fn(x, n_heads)  # (batch, n_heads, seq, d_head)\n",
    ),
    Edit(
        "07_multi_head.ipynb",
        "came_from_right = (right[0, 1] // 10).astype(int)",
        "assert np.array_equal(merge_heads(split_heads(x, n_heads)), x)\n",
        "assert np.array_equal(merge_fn(split_fn(x, n_heads)), x)\n",
    ),
    Edit(
        "07_multi_head.ipynb",
        "came_from_right = (right[0, 1] // 10).astype(int)",
        "assert np.array_equal(attnlib.heads.merge_heads(right), merge_heads(right))\n",
        "assert np.array_equal(attnlib.heads.merge_heads(right), merge_fn(right))\n",
    ),
    Edit(
        "07_multi_head.ipynb",
        "lib_out, lib_weights = mha_forward(mha, x_seq, x_seq, x_seq)",
        "    my_out, my_weights = mha_by_hand(x_seq, x_seq, x_seq, *args)\n",
        "    "
        + note("mha_by_hand")
        + f"    my_out, my_weights = {yours('mha_by_hand', 'mha_by_hand')}(x_seq, x_seq, x_seq, *args)\n",
    ),
    # ---- 08 masks -------------------------------------------------------------------------
    Edit(
        "08_masks.ipynb",
        'padded = [s + ["<pad>"] * (seq - len(s)) for s in sentences]',
        "assert np.array_equal(causal_mask(seq), attnlib.causal_mask(seq))\n"
        "assert np.array_equal(padding_mask(lengths, seq), attnlib.padding_mask(lengths, seq))\n",
        note("causal_mask and padding_mask", plural=True)
        + f"assert np.array_equal({yours('causal_mask', 'causal_mask')}(seq), attnlib.causal_mask(seq))\n"
        f"assert np.array_equal({yours('padding_mask', 'padding_mask')}(lengths, seq),\n"
        "                      attnlib.padding_mask(lengths, seq))\n",
    ),
    # ---- 09 syntactic roles ---------------------------------------------------------------
    Edit(
        "09_syntactic_roles.ipynb",
        "tracker = int(sub_fronted.argmax())",
        "on_subject = attention_on(weights, with_attractor.subject)  # (n_heads,)\n"
        "on_attractor = attention_on(weights, with_attractor.attractor)\n",
        note("attention_on") + f"mean_on = {yours('attention_on', 'attention_on')}\n"
        "on_subject = mean_on(weights, with_attractor.subject)  # (n_heads,)\n"
        "on_attractor = mean_on(weights, with_attractor.attractor)\n",
    ),
    Edit(
        "09_syntactic_roles.ipynb",
        "tracker = int(sub_fronted.argmax())",
        "sub_start = attention_on(weights[~fronted], with_attractor.subject[~fronted])\n"
        "sub_fronted = attention_on(weights[fronted], with_attractor.subject[fronted])\n",
        "sub_start = mean_on(weights[~fronted], with_attractor.subject[~fronted])\n"
        "sub_fronted = mean_on(weights[fronted], with_attractor.subject[fronted])\n",
    ),
    Edit(
        "09_syntactic_roles.ipynb",
        "role_scores = {",
        "role_scores = {\n"
        '    "keys": probe_accuracy(tr["keys"], tr["role"], te["keys"], te["role"]),\n'
        '    "before context": probe_accuracy(tr["x0"], tr["role"], te["x0"], te["role"]),\n',
        note("probe_accuracy") + f"probe_fn = {yours('probe_accuracy_heldout', 'probe_accuracy')}\n"
        "role_scores = {\n"
        '    "keys": probe_fn(tr["keys"], tr["role"], te["keys"], te["role"]),\n'
        '    "before context": probe_fn(tr["x0"], tr["role"], te["x0"], te["role"]),\n',
    ),
    Edit(
        "09_syntactic_roles.ipynb",
        "number_scores = {",
        "number_scores = {\n"
        '    "values": probe_accuracy(tr["values"], tr["number"], te["values"], te["number"]),\n'
        '    "keys": probe_accuracy(tr["keys"], tr["number"], te["keys"], te["number"]),\n',
        note("probe_accuracy") + f"probe_fn = {yours('probe_accuracy_heldout', 'probe_accuracy')}\n"
        "number_scores = {\n"
        '    "values": probe_fn(tr["values"], tr["number"], te["values"], te["number"]),\n'
        '    "keys": probe_fn(tr["keys"], tr["number"], te["keys"], te["number"]),\n',
    ),
    Edit(
        "09_syntactic_roles.ipynb",
        "def head_outputs(data):",
        "looks_away = w_subj < 0.1  # (batch, n_heads)\n",
        "looks_away = w_subj < 0.1  # (batch, n_heads)\n"
        + note("probe_accuracy")
        + f"probe_fn = {yours('probe_accuracy_heldout', 'probe_accuracy')}\n",
    ),
    Edit(
        "09_syntactic_roles.ipynb",
        "def head_outputs(data):",
        "    acc_away = probe_accuracy(out_tr[:, h],",
        "    acc_away = probe_fn(out_tr[:, h],",
    ),
    # ---- 11 blockwise ---------------------------------------------------------------------
    Edit(
        "11_blockwise.ipynb",
        "vals = np.random.default_rng(1).standard_normal((12, 2))",
        "m, l, acc = np.full((2, 1), -np.inf), np.zeros((2, 1)), np.zeros((2, 2))\n",
        note("online_softmax_update")
        + f"update_fn = {yours('online_softmax_update_blocks', 'online_softmax_update')}\n"
        "m, l, acc = np.full((2, 1), -np.inf), np.zeros((2, 1)), np.zeros((2, 2))\n",
    ),
    Edit(
        "11_blockwise.ipynb",
        "vals = np.random.default_rng(1).standard_normal((12, 2))",
        "    m, l, acc = online_softmax_update(m, l, acc, s[:, block], vals[block])\n",
        "    m, l, acc = update_fn(m, l, acc, s[:, block], vals[block])\n",
    ),
    # ---- 12 positions ---------------------------------------------------------------------
    Edit(
        "12_positions.ipynb",
        "qs, ks, vs = x @ W_q, x @ W_k, x @ W_v",
        "out, _ = rotary_attend(qs, ks, vs, np.arange(6))\n"
        "out_perm, _ = rotary_attend(qs[perm], ks[perm], vs[perm], np.arange(6))\n",
        note("rotary_attend") + f"rotary_fn = {yours('rotary_attend_output', 'rotary_attend')}\n"
        "out, _ = rotary_fn(qs, ks, vs, np.arange(6))\n"
        "out_perm, _ = rotary_fn(qs[perm], ks[perm], vs[perm], np.arange(6))\n",
    ),
    Edit(
        "12_positions.ipynb",
        "attnlib.attend(apply_rotary(qs), apply_rotary(ks), vs)[0])",
        "assert np.allclose(rotary_attend(qs, ks, vs, np.arange(6))[0],",
        "assert np.allclose(rotary_fn(qs, ks, vs, np.arange(6))[0],",
    ),
    # ---- 13 induction heads ---------------------------------------------------------------
    Edit(
        "13_induction_heads.ipynb",
        "control_run = control.run(test)",
        "prev = previous_token_score(run.weights0)  # (n_heads,), layer 0\n",
        note("previous_token_score")
        + f"prev_score = {yours('previous_token_score', 'previous_token_score')}\n"
        "prev = prev_score(run.weights0)  # (n_heads,), layer 0\n",
    ),
    Edit(
        "13_induction_heads.ipynb",
        "control_run = control.run(test)",
        'print("control: previous-token", np.round(previous_token_score(control_run.weights0)',
        'print("control: previous-token", np.round(prev_score(control_run.weights0)',
    ),
    Edit(
        "13_induction_heads.ipynb",
        "control_run = control.run(test)",
        "assert (previous_token_score(control_run.weights0) < 0.15).all()",
        "assert (prev_score(control_run.weights0) < 0.15).all()",
    ),
    Edit(
        "13_induction_heads.ipynb",
        "def cols(W, head):",
        "with torch.no_grad():\n    W_q1, W_k1, W_v0",
        note("k_composition") + f"k_comp = {yours('k_composition', 'k_composition')}\n"
        "with torch.no_grad():\n    W_q1, W_k1, W_v0",
    ),
    Edit(
        "13_induction_heads.ipynb",
        "def cols(W, head):",
        "    mine = np.array([[k_composition(cols(W_q1, j)",
        "    mine = np.array([[k_comp(cols(W_q1, j)",
    ),
    # ---- 14 fewer keys --------------------------------------------------------------------
    Edit(
        "14_fewer_keys.ipynb",
        "for seq_q, seq_k, W in [(5, 5, 2), (3, 10, 4), (1, 9, 3), (6, 6, 6)]:",
        "for seq_q, seq_k, W in [(5, 5, 2),",
        note("sliding_window_mask")
        + f"window_fn = {yours('sliding_window_mask', 'sliding_window_mask')}\n"
        "for seq_q, seq_k, W in [(5, 5, 2),",
    ),
    Edit(
        "14_fewer_keys.ipynb",
        "for seq_q, seq_k, W in [(5, 5, 2), (3, 10, 4), (1, 9, 3), (6, 6, 6)]:",
        "    mine = sliding_window_mask(seq_q, seq_k, W)\n",
        "    mine = window_fn(seq_q, seq_k, W)\n",
    ),
    Edit(
        "14_fewer_keys.ipynb",
        "for seq_q, seq_k, W in [(5, 5, 2), (3, 10, 4), (1, 9, 3), (6, 6, 6)]:",
        "print(sliding_window_mask(3, 10, 4).astype(int))",
        "print(window_fn(3, 10, 4).astype(int))",
    ),
    Edit(
        "14_fewer_keys.ipynb",
        "layer = latent.LatentAttention(d_model=32",
        "mine = absorbed_scores(q_c, c, layer.up_key_weight(), q_r, k_r)\n",
        note("absorbed_scores")
        + f"mine = {yours('absorbed_scores', 'absorbed_scores')}(q_c, c, layer.up_key_weight(), q_r, k_r)\n",
    ),
    Edit(
        "14_fewer_keys.ipynb",
        "indexer = selection.Indexer(d_model, n_index_heads=2, d_index=8)",
        "kept = topk_mask(index, 4, causal)\n",
        note("topk_mask")
        + f"topk_fn = {yours('topk_mask', 'topk_mask')}\nkept = topk_fn(index, 4, causal)\n",
    ),
    Edit(
        "14_fewer_keys.ipynb",
        "indexer = selection.Indexer(d_model, n_index_heads=2, d_index=8)",
        "every = topk_mask(index, T, causal)\n",
        "every = topk_fn(index, T, causal)\n",
    ),
    Edit(
        "14_fewer_keys.ipynb",
        "indexer = selection.Indexer(d_model, n_index_heads=2, d_index=8)",
        "by_rule = torch.nonzero(topk_mask(eight, 3,",
        "by_rule = torch.nonzero(topk_fn(eight, 3,",
    ),
)


class EditError(RuntimeError):
    """An edit that cannot be applied: its anchor or its old text is not where it should be."""


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def apply_edits(nb: dict, edits: list[Edit], lesson: str) -> tuple[int, int]:
    """Apply ``edits`` to the notebook dict in place; returns (applied, already there)."""
    applied = skipped = 0
    code = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    for e in edits:
        cells = [c for c in code if e.anchor in _source(c)]
        if len(cells) != 1:
            raise EditError(f"{lesson}: anchor {e.anchor!r} is in {len(cells)} code cells, not 1")
        cell = cells[0]
        src = _source(cell)
        if e.new in src:
            skipped += 1
            continue
        n = src.count(e.old)
        if n != 1:
            msg = f"{lesson}: {e.old!r} occurs {n} times in the cell of {e.anchor!r}, not once"
            raise EditError(msg)
        cell["source"] = src.replace(e.old, e.new).splitlines(keepends=True)
        applied += 1
    return applied, skipped


def run(notebooks: Path, *, check: bool = False) -> int:
    by_lesson: dict[str, list[Edit]] = {}
    for e in EDITS:
        by_lesson.setdefault(e.lesson, []).append(e)
    todo = 0
    for lesson, edits in sorted(by_lesson.items()):
        path = notebooks / lesson
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
        applied, skipped = apply_edits(nb, edits, lesson)
        todo += applied
        verb = "to apply" if check else "applied"
        print(f"{lesson}: {applied} {verb}, {skipped} already there")
        if applied and not check:
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return todo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="?", default=str(ROOT / "notebooks"), type=Path)
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if an edit is to do"
    )
    args = parser.parse_args(argv)
    try:
        todo = run(args.notebooks, check=args.check)
    except EditError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 1 if args.check and todo else 0


if __name__ == "__main__":
    sys.exit(main())
