"""Test support shared by the tests, the experiments and the demo: real peers, agent processes,
factories and a live notary. Nothing here is a test, and nothing here imports `tests`."""
