"""Child processes the tests and experiments start and SIGKILL: agents, journal writers, ledger
writers, HTTP racers. Each is run with `python -m testkit.agents.<name>`."""

AGENT_PROCESS = "testkit.agents.agent_process"
