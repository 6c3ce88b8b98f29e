"""roxie.losses: pure loss and target functions, rlax-style.

Every function takes ONE unbatched example; batch with `jax.vmap`.
"""

from roxie.losses.multistep import lambda_returns
from roxie.losses.multistep import n_step_returns
from roxie.losses.multistep import n_step_transition
from roxie.losses.multistep import NStepOutput

__all__ = (
    'lambda_returns',
    'n_step_returns',
    'n_step_transition',
    'NStepOutput',
)
