"""The torch calls perfaudit looks for, named once, and how to read a call in Python's AST.

Shared by the static pass (`perfaudit.static`), the source locator (`perfaudit.source`) and the facts
that find lines from the trace, so that the three agree on what a sync, a copy or a creation is.
Imports no torch.
"""
from __future__ import annotations

import ast

# Tensor methods that copy a device value to the host (and so wait for the device).
HOST_READS = frozenset({"item", "cpu", "numpy", "tolist"})
# Calls that move a tensor to the device.
DEVICE_COPIES = frozenset({"to", "cuda", "copy_"})
# torch factory functions: without `device=` they create on the host. Not `from_numpy`: it wraps a NumPy
# array's host memory and takes no `device=`; its move is a copy of host data (COPY001's), as a batch's is.
CREATION = frozenset({"randn", "rand", "randint", "zeros", "ones", "empty", "full", "arange", "linspace", "logspace",
                      "eye", "tensor", "as_tensor", "randperm", "normal", "hann_window", "hamming_window",
                      "blackman_window", "bartlett_window", "kaiser_window", "tril_indices", "triu_indices"})
# Optimizers with a foreach and (for the first four) a fused implementation in torch 2.x.
FUSABLE_OPTIMIZERS = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
FOREACH_OPTIMIZERS = FUSABLE_OPTIMIZERS | {"Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop"}
# frameworks that build the optimizer from an option naming it: package -> (option, {non-fused name: fused name})
# (Hugging Face's Trainer: `optim="adamw_torch"` is torch's AdamW without fused=; its default is fused on
# torch >= 2.8)
FRAMEWORK_OPTIMIZER_OPTIONS = {"transformers": ("optim", {"adamw_torch": "adamw_torch_fused",
                                                          "adamw_hf": "adamw_torch_fused"})}
# host reads a framework makes every step on the user's behalf: (file, function) -> what it is and the option
# that turns it off (the Trainer's `torch.isnan(loss) or torch.isinf(loss)`, two device reads a step)
# (in _inner_training_loop up to transformers 4.x, _run_epoch from 5.0)
_NAN_INF_FILTER = ("the Hugging Face Trainer's nan/inf filter reading the loss",
                   "TrainingArguments(logging_nan_inf_filter=False)")
# (a model's forward given an attention mask reads whether it holds any padding, to run SDPA causal without it)
_MASK_CHECK = ("Hugging Face Transformers checking the attention mask for padding (every forward given one)",
               "attention_mask=None where no token is padding (every batch of full-length sequences)")
FRAMEWORK_READS = {("transformers/trainer.py", "_inner_training_loop"): _NAN_INF_FILTER,
                   ("transformers/trainer.py", "_run_epoch"): _NAN_INF_FILTER,
                   ("transformers/masking_utils.py", "_ignore_causal_mask_sdpa"): _MASK_CHECK}
# reads of a device value torch's own functions make every step when asked to check it, at the user's call:
# (file, function that reads) -> what it is and the argument that turns it off
_NONFINITE = ("clip_grad_norm_(error_if_nonfinite=True) checks the total norm on the host", "error_if_nonfinite=False")
_VALIDATE = ("torch.distributions checks its arguments on the host (validate_args, on by default)",
             "validate_args=False (or torch.distributions.Distribution.set_default_validate_args(False) once)")
# torch.distributions' classes: each checks its arguments on the host unless built with validate_args=False
DISTRIBUTIONS = frozenset({
    "Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2", "ContinuousBernoulli", "Dirichlet",
    "Exponential", "FisherSnedecor", "Gamma", "GeneralizedPareto", "Geometric", "Gumbel", "HalfCauchy", "HalfNormal",
    "Independent", "InverseGamma", "Kumaraswamy", "LKJCholesky", "Laplace", "LogNormal", "LogisticNormal",
    "LowRankMultivariateNormal", "MixtureSameFamily", "Multinomial", "MultivariateNormal", "NegativeBinomial",
    "Normal", "OneHotCategorical", "OneHotCategoricalStraightThrough", "Pareto", "Poisson", "RelaxedBernoulli",
    "RelaxedOneHotCategorical", "StudentT", "TransformedDistribution", "Uniform", "VonMises", "Weibull", "Wishart"})
_STD_CHECK = ("Normal.sample() checks on the host that every std is >= 0 (torch.normal with a tensor std)",
              "drawing with .rsample() (loc + scale * noise; under torch.no_grad() where no gradient is wanted)")
TORCH_READS = {("torch/nn/utils/clip_grad.py", "_get_total_norm"): _NONFINITE,
               ("torch/distributions/normal.py", "sample"): _STD_CHECK,
               ("torch/nn/utils/clip_grad.py", "clip_grad_norm_"): _NONFINITE,
               ("torch/distributions/distribution.py", "__init__"): _VALIDATE,
               ("torch/distributions/distribution.py", "_validate_sample"): _VALIDATE}

# What to look for in the user's function when a sync op has no Python call of its own (a slot such
# as bool(t) or t[mask] called from C): call names, then syntactic forms ("branch", "mask").
SCALAR_READ_CALLS = frozenset({"float", "int", "bool"})
NONZERO_CALLS = frozenset({"nonzero", "where", "argwhere", "masked_select", "unique"})
SYNC_CALLS = HOST_READS | {"to", "synchronize"}


def call_name(node: ast.Call) -> str | None:
    """`item` for `x.item()`, `print` for `print(x)`."""
    fn = node.func
    if isinstance(fn, ast.Attribute):
        return fn.attr
    if isinstance(fn, ast.Name):
        return fn.id
    return None


def literal(node):
    """The value of a literal expression, `...` when it is not one."""
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ...


def literal_kwargs(node: ast.Call) -> dict:
    """Keyword arguments with literal values; a non-literal value is `...` (present, unknown)."""
    return {kw.arg: literal(kw.value) for kw in node.keywords if kw.arg is not None}


def dict_literal(node) -> dict | None:
    """The keys of a dict the source spells out (`{"a": 1}`, `dict(a=1)`), values literal or `...`;
    None for anything else."""
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
        return {k.value: literal(v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return literal_kwargs(node) if not has_star_kwargs(node) else None
    return None


def resolved_kwargs(node: ast.Call, dicts: dict[str, dict | None]) -> dict | None:
    """The call's keyword arguments with `**name` expanded where `name` is a dict the same scope spells
    out (`loader_kwargs = dict(batch_size=32)`; `DataLoader(ds, **loader_kwargs)`); None when a `**`
    argument cannot be read (then any keyword may be set)."""
    out = {}
    for kw in node.keywords:
        if kw.arg is not None:
            out[kw.arg] = literal(kw.value)
        elif isinstance(kw.value, ast.Name) and (spelled := dicts.get(kw.value.id)) is not None:
            out.update(spelled)
        else:
            return None
    return out


def has_star_kwargs(node: ast.Call) -> bool:
    """`f(**kwargs)`: any keyword may be set without the source showing it."""
    return any(kw.arg is None for kw in node.keywords)


def creates_on_host(node) -> bool:
    """`torch.randn(...)` and the other factories called without `device=`."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            and node.func.attr in CREATION and "device" not in literal_kwargs(node) and not has_star_kwargs(node))


def creates_on_host_text(expr: str) -> bool:
    """The same test on an expression's source text (the locator keeps calls as text)."""
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return False
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not creates_on_host(node):
        node = node.func.value  # torch.randn(3).float(): look through chained methods
    return creates_on_host(node)


_MASK_METHODS = frozenset({"eq", "ne", "gt", "ge", "lt", "le", "isnan", "isinf", "isfinite", "logical_and",
                           "logical_or", "logical_not", "logical_xor", "bool"})


def makes_mask(node: ast.AST) -> bool:
    """Whether an expression makes a boolean mask: a comparison, `~`/`&`/`|`/`^` of one, a boolean method, a
    tensor made or cast with `dtype=torch.bool` (`torch.tensor(flags, dtype=torch.bool)`, `.to(torch.bool)`)."""
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return makes_mask(node.left) or makes_mask(node.right)
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr in _MASK_METHODS:
        return True
    types = [k.value for k in node.keywords if k.arg == "dtype"]
    if isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "type"):
        types += node.args[:1]
    return any(_names_bool(t) for t in types)


def _names_bool(node: ast.AST) -> bool:
    """`torch.bool` or `bool` as a dtype."""
    return (isinstance(node, ast.Attribute) and node.attr == "bool") or (isinstance(node, ast.Name) and node.id == "bool")
