"""Verifiers that turn a run into a result a policy cannot pay itself through: values judged on the
trusted side (`values`), plain values across the sandbox's wall (`plain`)."""
