"""Online GRPO on the device (Python 3.6 + torch 1.10 safe): keep training a deployed policy from live
experience without breaking the policy it serves. `python3 -m grpo_edge.online --help`; docs/online.md.

    runner   the loop: experience -> candidate update -> gate (promote / roll back) -> atomic state
    config   the `online` section's keys, defaults and checks (shared value checks: core/validate.py)
    sources  experience from an environment, JSON lines on stdin, or TCP
    envs     a NumPy CartPole whose dynamics can change while it runs
"""
