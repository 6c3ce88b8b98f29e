"""ActionRepeat: k control steps per decision, rewards summed, exact ends."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import envs


def test_action_repeat_equals_k_plain_steps_and_truncates_on_the_boundary():
  plain = envs.make('CartpoleSwingup', num_envs=2, episode_length=8)
  rep = envs.make('CartpoleSwingup', num_envs=2, episode_length=8,
                  action_repeat=4)
  assert rep.spec.episode_length == 2
  np.testing.assert_allclose(rep.spec.control_timestep,
                             4 * plain.spec.control_timestep)
  assert (plain.spec.action_repeat, rep.spec.action_repeat) == (1, 4)
  from roxie.envs.wrappers import ActionRepeat  # pylint: disable=g-import-not-at-top
  assert ActionRepeat(rep, 2).spec.action_repeat == 8  # Nested: a product.
  s1, s4 = plain.reset(jax.random.PRNGKey(0)), rep.reset(jax.random.PRNGKey(0))
  step1, step4 = jax.jit(plain.step), jax.jit(rep.step)
  a = jnp.array([[0.5], [-0.3]])
  rewards = []
  for _ in range(8):
    s1, t1 = step1(s1, a)
    rewards.append(t1.reward)
  s4, first = step4(s4, a)
  s4, second = step4(s4, a)
  np.testing.assert_allclose(first.reward, sum(rewards[:4]), rtol=1e-6)
  np.testing.assert_allclose(second.reward, sum(rewards[4:]), rtol=1e-6)
  assert not first.truncated.any() and second.truncated.all()
  np.testing.assert_array_equal(second.final_obs, t1.final_obs)
  np.testing.assert_array_equal(second.obs, t1.obs)


def test_action_repeat_must_divide_the_episode_length():
  with pytest.raises(ValueError, match='does not divide'):
    envs.make('PendulumSwingup', num_envs=1, episode_length=10,
              action_repeat=3)
