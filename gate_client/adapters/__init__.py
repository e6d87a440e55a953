"""Adapters from the tools agents already use to the gate: provider targets (Stripe refunds,
Resend email), MCP tool calls, plain functions (`@gated`) and Temporal activities. Each needs its
provider's own SDK, installed with the matching extra; the gate itself needs none of them."""
