"""The residual critic torso (`critic_blocks`, BRO's BroNet) in every recipe.

With `critic_blocks` = N > 0 each off-policy recipe's critic (SAC's and
TD3's twins, D4PG's and TD4's categorical heads, DDPG's and MPO's single Q)
is a `networks.ResidualMLP` of N blocks, `critic_width` wide, and the actor
keeps the MLP of `hidden_sizes`; at 0 (the default) nothing changes.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import config as config_lib
from roxie.agents import d4pg, ddpg, mpo, sac, td3, td4
from roxie.types import EnvSpec, Transition

SPEC = EnvSpec(task='Synthetic', obs_size=4, action_size=2,
               obs_names=(('x', 4),), control_timestep=0.01,
               episode_length=100)
MODULES = {'ddpg': ddpg, 'td3': td3, 'd4pg': d4pg, 'td4': td4, 'sac': sac,
           'mpo': mpo}
SMALL = dict(hidden_sizes=(32, 32), batch_size=64, critic_lr=1e-3)


def _batch(name, n=64):
  k_obs, k_act, k_next = jax.random.split(jax.random.PRNGKey(5), 3)
  obs = jax.random.normal(k_obs, (n, SPEC.obs_size))
  action = jax.random.uniform(k_act, (n, SPEC.action_size), minval=-1.,
                              maxval=1.)
  reward = jnp.tanh(obs[:, 0]) - jnp.square(action[:, 0] - 0.5)
  discount = jnp.full((n,), 0.9)
  if name in ('d4pg', 'td4'):
    # Rewards of the size the default support is for, and terminal
    # transitions: point-mass targets the cross-entropy can fall towards
    # (from log K), as in test_off_policy.py.
    reward = 10. * (1. + reward)
    discount = jnp.zeros((n,))
  return Transition(obs=obs, action=action, reward=reward, discount=discount,
                    next_obs=jax.random.normal(k_next, (n, SPEC.obs_size)))


def _state(name, **overrides):
  recipe = MODULES[name].make(MODULES[name].Config(**dict(SMALL, **overrides)),
                              SPEC)
  return recipe, recipe.init(jax.random.PRNGKey(0), SPEC)


def _actor(state):
  return state.policy if hasattr(state, 'policy') else state.actor


@pytest.mark.parametrize('name', sorted(MODULES))
def test_critic_blocks_make_the_critic_residual_and_leave_the_actor(name):
  _, plain = _state(name)
  recipe, state = _state(name, critic_blocks=2, critic_width=16)
  names = sorted(state.critic)
  torso = [k for k in names if '/torso/' in k]
  # The embedding and two blocks of two LayerNorm-ed layers, 16 wide.
  assert len(torso) == 10, names
  assert sum(k.endswith('embed_linear') for k in torso) == 1
  assert sum('block_1_1' in k for k in torso) == 2
  for k in torso:
    if k.endswith('linear'):
      assert state.critic[k]['w'].shape[-1] == 16, k
  assert not any('embed' in k for k in plain.critic)
  # The actor is the same network either way.
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a.shape, b.shape),
               _actor(plain), _actor(state))

  # And it learns: the critic loss on a fixed batch falls.
  update = jax.jit(recipe.update)
  batch = _batch(name)
  losses = []
  for i in range(50):
    state, metrics = update(state, batch, jax.random.PRNGKey(i))
    losses.append(float(metrics['critic_loss']))
  assert np.all(np.isfinite(losses))
  fraction = 0.75 if name in ('d4pg', 'td4') else 0.5
  assert np.mean(losses[-5:]) < fraction * np.mean(losses[:5]), losses


@pytest.mark.parametrize('name', ['sac', 'td3', 'mpo'])
@pytest.mark.parametrize('overrides, message', [
    (dict(critic_blocks=-1), 'critic_blocks must be >= 0'),
    (dict(critic_width=0), 'critic_width must be >= 1'),
    (dict(critic_blocks=1, layer_norm=False), 'needs layer_norm=True'),
])
def test_bad_residual_settings_are_refused(name, overrides, message):
  bad = MODULES[name].Config(**overrides)
  with pytest.raises(config_lib.ConfigError, match=message):
    config_lib.validate(bad)
  config_lib.validate(MODULES[name].Config(critic_blocks=2, critic_width=64))
