"""roxie.networks: haiku modules for continuous-control agents.

An ELU for the CPU, torsos, policy heads (deterministic, tanh-Gaussian,
Gaussian), critics (Q, twin-Q, categorical, twin categorical, value) and the
small pure-jnp distributions the policy heads return, a pixel encoder and the
fusion of dict (image + vector) observations, and DrQ's random-shift
augmentation.
Build modules inside `hk.transform`.
"""

from roxie.networks.activations import elu
from roxie.networks.actors import DeterministicActor
from roxie.networks.actors import DeterministicActorOutput
from roxie.networks.actors import GaussianActor
from roxie.networks.actors import TanhGaussianActor
from roxie.networks.augment import random_shift
from roxie.networks.augment import random_shift_observation
from roxie.networks.critics import CategoricalCritic
from roxie.networks.critics import categorical_logits_at
from roxie.networks.critics import CategoricalQ
from roxie.networks.critics import QCritic
from roxie.networks.critics import TwinCategoricalCritic
from roxie.networks.critics import TwinQCritic
from roxie.networks.critics import ValueHead
from roxie.networks.critics import ValueNetwork
from roxie.networks.distributions import DiagGaussian
from roxie.networks.distributions import tanh_log_det_jacobian
from roxie.networks.distributions import TanhGaussian
from roxie.networks.pixels import check_pooling
from roxie.networks.pixels import encoded_critic
from roxie.networks.pixels import EncodedCritic
from roxie.networks.pixels import encoder_from_config
from roxie.networks.pixels import identity_encoder
from roxie.networks.pixels import is_image
from roxie.networks.pixels import make_shared_encoder
from roxie.networks.pixels import observation_encoder
from roxie.networks.pixels import ObservationEncoder
from roxie.networks.pixels import PixelConfig
from roxie.networks.pixels import pixel_config
from roxie.networks.pixels import PixelEncoder
from roxie.networks.pixels import policy_input
from roxie.networks.pixels import policy_params_with_encoder
from roxie.networks.pixels import POOLINGS
from roxie.networks.pixels import RESOLUTION_AGNOSTIC_POOLINGS
from roxie.networks.pixels import SharedEncoder
from roxie.networks.pixels import spatial_softmax
from roxie.networks.normalization import BatchRenorm
from roxie.networks.normalization import BatchRenormMLP
from roxie.networks.policies import deterministic_actor
from roxie.networks.policies import deterministic_policy
from roxie.networks.policies import deterministic_policy_params
from roxie.networks.policies import make_deterministic_policy
from roxie.networks.torsos import check_last_axis
from roxie.networks.torsos import critic_torso
from roxie.networks.torsos import ensemble
from roxie.networks.torsos import MLP
from roxie.networks.torsos import ResidualMLP
from roxie.networks.torsos import small_init

__all__ = (
    'BatchRenorm',
    'BatchRenormMLP',
    'CategoricalCritic',
    'categorical_logits_at',
    'CategoricalQ',
    'check_last_axis',
    'check_pooling',
    'critic_torso',
    'deterministic_actor',
    'deterministic_policy',
    'deterministic_policy_params',
    'DeterministicActor',
    'DeterministicActorOutput',
    'DiagGaussian',
    'elu',
    'encoded_critic',
    'encoder_from_config',
    'EncodedCritic',
    'ensemble',
    'GaussianActor',
    'identity_encoder',
    'is_image',
    'make_deterministic_policy',
    'make_shared_encoder',
    'MLP',
    'observation_encoder',
    'ObservationEncoder',
    'pixel_config',
    'PixelConfig',
    'PixelEncoder',
    'policy_input',
    'policy_params_with_encoder',
    'POOLINGS',
    'QCritic',
    'random_shift',
    'random_shift_observation',
    'ResidualMLP',
    'RESOLUTION_AGNOSTIC_POOLINGS',
    'SharedEncoder',
    'small_init',
    'spatial_softmax',
    'tanh_log_det_jacobian',
    'TanhGaussian',
    'TanhGaussianActor',
    'TwinCategoricalCritic',
    'TwinQCritic',
    'ValueHead',
    'ValueNetwork',
)
