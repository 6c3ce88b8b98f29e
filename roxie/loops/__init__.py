"""Scanned collectors, evaluation and the compiled training loop."""

from roxie.loops.check import RecipeError
from roxie.loops.check import check_policy
from roxie.loops.check import check_recipe
from roxie.loops.collect import EpisodeStats
from roxie.loops.collect import Step
from roxie.loops.collect import make_env_step
from roxie.loops.collect import uniform_actions
from roxie.loops.compiled import LoopOutput
from roxie.loops.compiled import LoopState
from roxie.loops.compiled import env_steps_per_iteration
from roxie.loops.compiled import make_compiled_loop
from roxie.loops.evaluate import EvalResult
from roxie.loops.evaluate import make_evaluator
from roxie.loops.host import HostPhysicsInUse
from roxie.loops.population import check_hparams
from roxie.loops.population import make_population_loop
from roxie.loops.population import member
from roxie.loops.population import member_config
from roxie.loops.population import population_env
from roxie.loops.population import population_grid
from roxie.loops.population import population_keys
from roxie.loops.population import sweepable_fields

__all__ = (
    'EpisodeStats',
    'EvalResult',
    'HostPhysicsInUse',
    'LoopOutput',
    'LoopState',
    'RecipeError',
    'Step',
    'check_policy',
    'check_recipe',
    'env_steps_per_iteration',
    'make_compiled_loop',
    'make_env_step',
    'make_evaluator',
    'check_hparams',
    'make_population_loop',
    'member',
    'member_config',
    'population_env',
    'population_grid',
    'population_keys',
    'sweepable_fields',
    'uniform_actions',
)
