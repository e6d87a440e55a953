"""The child processes the scenarios start, SIGKILL and start again, and the webhook relay that
stands in for a provider's sender: one place for everything that runs outside the harness."""
