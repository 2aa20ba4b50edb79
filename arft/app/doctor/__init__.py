"""`arft doctor`: the talk's four principles as checks, each with a verdict and what to do.

1. The task is well defined: every row carries the item fields the grader reads, every tool a
   row names is one the job starts, and the grader validates.
2. Training and validation look like real traffic: sizes, rows shared between the splits
   (exact and near-duplicate prompts), drift between train, validation and real traffic
   (``arft.data.checks``).
3. The model can improve by exploring: baseline rollouts (k per task on the first training
   tasks) vary in reward on enough tasks, and pass@k is above pass@1.
4. The reward is unhackable and continuous: the grader audit (``arft.graders.audit``), on the
   same first training tasks, with the baseline's grades for continuity.

Each check is a ``Check`` record (pass / warn / fail, or skip when it could not run) with what
was measured, the threshold it was held to and, when it is not a pass, what to do. Thresholds
are named constants below; a warning never fails the doctor, a failure does.
"""


from __future__ import annotations

from arft.app.doctor.checks import Check, DoctorReport
from arft.app.doctor.run import run_doctor
from arft.app.doctor.task_checks import DoctorData, load_data

__all__ = ["Check", "DoctorData", "DoctorReport", "load_data", "run_doctor"]
