"""roxie.buffers: device-resident replay, rollout storage, normalisers, noise.

Every piece is a set of pure functions over a NamedTuple state (optax-style),
with static shapes, so it runs under `jax.jit`, `lax.scan` and buffer
donation.
"""

from roxie.buffers.noise import ExplorationNoise
from roxie.buffers.noise import gaussian_noise
from roxie.buffers.noise import linear_schedule
from roxie.buffers.noise import NoiseState
from roxie.buffers.noise import ornstein_uhlenbeck_noise
from roxie.buffers.noise import ou_stationary_stddev
from roxie.buffers.normalizer import normalize
from roxie.buffers.normalizer import normalizer_as_dict
from roxie.buffers.normalizer import normalizer_count
from roxie.buffers.normalizer import normalizer_from_dict
from roxie.buffers.normalizer import normalizer_init
from roxie.buffers.normalizer import normalizer_merge
from roxie.buffers.normalizer import normalizer_update
from roxie.buffers.normalizer import NormalizerState
from roxie.buffers.normalizer import observation_normalizer_init
from roxie.buffers.replay import FrameStore
from roxie.buffers.replay import replay_add
from roxie.buffers.replay import replay_can_sample
from roxie.buffers.replay import replay_init
from roxie.buffers.replay import replay_num_sampleable
from roxie.buffers.replay import replay_resize
from roxie.buffers.replay import replay_sample
from roxie.buffers.replay import replay_size
from roxie.buffers.replay import ReplayState
from roxie.buffers.replay import resize_images
from roxie.buffers.replay import resize_observation
from roxie.buffers.rollout import rollout_add
from roxie.buffers.rollout import rollout_from_steps
from roxie.buffers.rollout import rollout_get
from roxie.buffers.rollout import rollout_init
from roxie.buffers.rollout import rollout_is_full
from roxie.buffers.rollout import RolloutState

__all__ = (
    'ExplorationNoise',
    'FrameStore',
    'gaussian_noise',
    'linear_schedule',
    'NoiseState',
    'normalize',
    'normalizer_as_dict',
    'normalizer_count',
    'normalizer_from_dict',
    'normalizer_init',
    'normalizer_merge',
    'normalizer_update',
    'NormalizerState',
    'observation_normalizer_init',
    'ornstein_uhlenbeck_noise',
    'ou_stationary_stddev',
    'replay_add',
    'replay_can_sample',
    'replay_init',
    'replay_num_sampleable',
    'replay_resize',
    'replay_sample',
    'replay_size',
    'ReplayState',
    'resize_images',
    'resize_observation',
    'rollout_add',
    'rollout_from_steps',
    'rollout_get',
    'rollout_init',
    'rollout_is_full',
    'RolloutState',
)
