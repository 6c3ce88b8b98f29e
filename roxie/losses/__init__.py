"""roxie.losses: pure loss and target functions, rlax-style.

Every function takes ONE unbatched example; batch with `jax.vmap`.
"""

from roxie.losses.distributional import categorical_mean
from roxie.losses.distributional import categorical_td_loss
from roxie.losses.distributional import categorical_td_target
from roxie.losses.distributional import twin_categorical_target
from roxie.losses.distributions import gaussian_entropy
from roxie.losses.distributions import gaussian_kl
from roxie.losses.distributions import gaussian_log_prob
from roxie.losses.dpg import dpg_actor_loss
from roxie.losses.dpg import dpg_loss
from roxie.losses.dpg import saturation_penalty
from roxie.losses.mpo import gaussian_mpo_loss
from roxie.losses.mpo import mpo_e_step
from roxie.losses.mpo import mpo_m_step
from roxie.losses.mpo import MpoEStepOutput
from roxie.losses.mpo import MpoMStepOutput
from roxie.losses.mpo import MpoOutput
from roxie.losses.multistep import lambda_returns
from roxie.losses.multistep import n_step_returns
from roxie.losses.multistep import n_step_transition
from roxie.losses.multistep import NStepOutput
from roxie.losses.ppo import gae_advantages
from roxie.losses.ppo import GaeOutput
from roxie.losses.ppo import ppo_policy_loss
from roxie.losses.ppo import ppo_value_loss
from roxie.losses.ppo import PpoPolicyOutput
from roxie.losses.sac import sac_actor_loss
from roxie.losses.sac import sac_critic_target
from roxie.losses.sac import sac_temperature_loss
from roxie.losses.value_learning import clipped_double_q
from roxie.losses.value_learning import ensemble_min_q
from roxie.losses.value_learning import ensemble_q_target
from roxie.losses.value_learning import td_target
from roxie.losses.value_learning import twin_q_target

__all__ = (
    'categorical_mean',
    'categorical_td_loss',
    'categorical_td_target',
    'clipped_double_q',
    'dpg_actor_loss',
    'dpg_loss',
    'ensemble_min_q',
    'ensemble_q_target',
    'gae_advantages',
    'GaeOutput',
    'gaussian_entropy',
    'gaussian_kl',
    'gaussian_log_prob',
    'gaussian_mpo_loss',
    'lambda_returns',
    'mpo_e_step',
    'mpo_m_step',
    'MpoEStepOutput',
    'MpoMStepOutput',
    'MpoOutput',
    'n_step_returns',
    'n_step_transition',
    'NStepOutput',
    'ppo_policy_loss',
    'ppo_value_loss',
    'PpoPolicyOutput',
    'sac_actor_loss',
    'sac_critic_target',
    'sac_temperature_loss',
    'saturation_penalty',
    'td_target',
    'twin_categorical_target',
    'twin_q_target',
)
