"""What the trainer learns from the log: conversations rebuilt from episodes, SFT/DPO/ART exports,
GRPO groups and the RULER judge; and the ledger of what each run trained on, which eval checks."""
