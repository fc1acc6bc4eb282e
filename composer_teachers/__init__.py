"""composer-teachers: the teacher hook as a verifiers judge plugin
(`[[...taskset.task.judges]] id = "composer-teachers"`).

verifiers resolves a judge id to a top-level module exporting one `Judge` subclass; the mechanism lives in
`composer_prime.teachers` (docs/teachers.md).

May import: `composer_prime.teachers`.
"""

from composer_prime.teachers.judge import TeacherJudge

__all__ = ["TeacherJudge"]
