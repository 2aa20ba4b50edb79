"""What each arft command does, over one run lifecycle (``open_run``): evaluate, train, doctor.

The CLI parses arguments and prints; everything a command does with an engine, tools, a grader
and a store happens here, so a new front end (``arft serve``, a Ray driver) builds a run the same
way.

``run`` (``open_run``), ``evaluate``, ``train`` (with ``ahead`` for async rollouts and
``cluster/`` for Ray), ``sft``, ``expert_iteration`` (``arft train --warm-start``), ``doctor/``,
``serve/``; what ``train`` and ``sft`` share: ``session`` (the live objects, hooks, periodic
evaluation), ``policy`` (the policy, its engine, ``training.init_from``) and ``resume``.
"""
