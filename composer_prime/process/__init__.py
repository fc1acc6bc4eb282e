"""Process plumbing: starting, tagging, fencing and ending the processes this project runs.

- `children`: `spawn` (a child in a session of its own that the kernel ends when its parent dies, PR_SET_PDEATHSIG),
  `descendants`, `stop_group`, and `Service` (a server on 127.0.0.1, ready once it answers);
- `group`: a child run as a process group (its output to a log), stopped as a group; `run` to its end;
- `ports`: free ports on 127.0.0.1, one or in blocks, outside the kernel's ephemeral range and reserved across
  processes until the picking process exits;
- `commands`: a host command that must succeed, with its output's tail in the caller's error;
- `reaper`: kills every process a rollout box started, by the tags they carry (docs/grading.md);
- `pidns`: the rollout's PID namespace, killed whole when grading starts (docs/grading.md);
- `jail`: a read-only view of the host for the agent's commands and the code under test on the subprocess runtime,
  the task's expected side covered, no capability left (docs/grading.md, "The trust chain").

May import: nothing of the project (the standard library only).
"""
