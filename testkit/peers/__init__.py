"""The services agents act on, run as real processes: the reference payment service, a local
Resend API, localstripe."""
