"""roxie.buffers: device-resident replay, rollout storage, normalisers, noise."""

from roxie.buffers.replay import replay_add
from roxie.buffers.replay import replay_can_sample
from roxie.buffers.replay import replay_init
from roxie.buffers.replay import replay_num_sampleable
from roxie.buffers.replay import replay_sample
from roxie.buffers.replay import ReplayState
