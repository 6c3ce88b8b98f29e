"""Learning tests: every recipe against its own untrained self and zero actions.

A learning test that a broken agent passes protects nothing. On
CartpoleBalance with 200-step episodes the zero action already scores ~137
and an untrained recipe's deterministic policy ~140 (a near-zero action), so
"beats random" (119) says little. Each test here measures both baselines for
the same config and seed in the same process, and asks the trained agent to
clear the better of them by a margin AND an absolute floor that neither
baseline reaches in 10 episodes. The update-math tests
(`test_update_math.py`) are what catch a wrong target; these catch an agent
that does not learn at all.

Only one cheap run (DDPG, seed 0) is in the default tier; the seven recipes
over three seeds and SAC on CartpoleSwingup are `slow`.

Calibration (the whole slow tier, 2026-12-01, `pytest -m slow -s
tests/agents/test_learning.py`, 21 passed in 33 min at load 8-12): trained
188.7-199.8 over the 21 runs (lowest: MPO seed 1, 188.7, whose untrained
policy scored the highest baseline, 147.5); untrained policies 127.1-147.5,
zero actions 132.8-141.7. So the weakest pass clears its threshold
(max(147.5, 141.7) + 25 = 172.5) by 16, and the best baseline stays 22
under the floor. SAC on CartpoleSwingup: 835.7 against 0.0 / 0.0.
"""

import jax
import jax.numpy as jnp
import pytest

from roxie import envs, loops, run
from roxie.agents import get_agent
from roxie.types import Recipe

EPISODE_LENGTH = 200
EPISODES = 10
# Margin over the better baseline, and an absolute floor: the zero action's
# 10-episode mean is 137 +- 6, so 170 is > 5 standard errors above it.
MARGIN = 25.
FLOOR = 170.

# The four deterministic-policy recipes share one cheap config, with the
# 3-step targets it was calibrated on: with the one-step default (TD3's and
# DDPG's on 2026-12-07, then the skeleton's), DDPG seed 0 had not learnt in
# these 12k env steps (125.5 against its zero action's 132.8). One-step
# targets are learnt in the slow tier's SAC runs.
_DPG = {'hidden_sizes': (64, 64), 'actor_lr': 1e-3, 'critic_lr': 1e-3,
        'batch_size': 128, 'updates_per_iteration': 8, 'warmup_steps': 1_000,
        'n_step': 3}
# (steps, num_envs, overrides) per recipe on CartpoleBalance.
SETTINGS = {
    'ddpg': (12_000, 8, _DPG),
    'td3': (12_000, 8, _DPG),
    'd4pg': (12_000, 8, _DPG),
    'td4': (12_000, 8, _DPG),
    'sac': (12_000, 8, {'warmup_steps': 1_000, 'hidden_sizes': (64, 64),
                        'batch_size': 128, 'updates_per_iteration': 8,
                        'action_repeat': 1}),
    'mpo': (12_000, 8, {'hidden_sizes': (128, 128), 'num_samples': 10,
                        'warmup_steps': 2_000, 'updates_per_iteration': 2}),
    'ppo': (48_000, 16, {}),
}


def _zero_recipe(action_size):
  return Recipe(
      name='zero', config=None, init=lambda key, spec: (),
      act=lambda state, obs, key, explore=False: (
          jnp.zeros((obs.shape[0], action_size)), {}),
      update=None, on_policy=True, rollout_length=1)


def baselines(agent, task, overrides, seed, episode_length=EPISODE_LENGTH):
  """(untrained recipe's deterministic return, zero action's return)."""
  env = envs.make(task, num_envs=EPISODES, episode_length=episode_length,
                  action_repeat=overrides.get('action_repeat', 1))
  module = get_agent(agent)
  config = module.Config(**run.split_overrides(overrides)[1])
  recipe = module.make(config, env.spec)
  state = recipe.init(jax.random.PRNGKey(seed), env.spec)
  key = jax.random.PRNGKey(1000 + seed)
  untrained = float(loops.make_evaluator(recipe, env)(state, key).mean)
  zero = _zero_recipe(env.spec.action_size)
  zeros = float(loops.make_evaluator(zero, env)((), key).mean)
  return untrained, zeros


def _check_learns(agent, seed):
  steps, num_envs, overrides = SETTINGS[agent]
  untrained, zeros = baselines(agent, 'CartpoleBalance', overrides, seed)
  result = run.train(
      agent, 'CartpoleBalance', steps=steps, num_envs=num_envs,
      eval_episodes=EPISODES, eval_every=steps,
      env_options={'episode_length': EPISODE_LENGTH}, verbose=False,
      out=None, seed=seed, overrides=overrides)
  line = (f'{agent} seed {seed}: trained {result.eval_return:.1f}, '
          f'untrained {untrained:.1f}, zero actions {zeros:.1f}')
  print(line)
  assert untrained < FLOOR and zeros < FLOOR, line
  assert result.eval_return > max(untrained, zeros) + MARGIN, line
  assert result.eval_return > FLOOR, line


def test_ddpg_learns_cartpole_balance():
  _check_learns('ddpg', 0)


@pytest.mark.slow
@pytest.mark.parametrize('seed', [0, 1, 2])
@pytest.mark.parametrize('agent', sorted(SETTINGS))
def test_learns_cartpole_balance(agent, seed):
  if (agent, seed) == ('ddpg', 0):
    pytest.skip('in the default tier: test_ddpg_learns_cartpole_balance')
  _check_learns(agent, seed)


@pytest.mark.slow
def test_sac_learns_cartpole_swingup():
  # The harder task, with SAC's defaults at action repeat 4 (as calibrated;
  # the task table's 8 is what `roxie train` now picks), 1000-step
  # episodes: hanging still scores near 0 and an untrained policy little
  # more; a swing-up earns ~800 (README).
  overrides = {'action_repeat': 4}
  untrained, zeros = baselines('sac', 'CartpoleSwingup', overrides, 0,
                               episode_length=1000)
  result = run.train('sac', 'CartpoleSwingup', steps=150_000,
                     eval_episodes=EPISODES, verbose=False, out=None, seed=0,
                     overrides=overrides)
  line = (f'sac CartpoleSwingup: trained {result.eval_return:.1f}, '
          f'untrained {untrained:.1f}, zero actions {zeros:.1f}')
  print(line)
  assert result.eval_return > max(untrained, zeros) + 300., line
  assert result.eval_return > 600., line
