"""What the harness refuses to run, decided from the candidate's syntax tree in the parent.

Each rule has a name and a one-line reason, and every finding names its line. Names are resolved
through import aliases and simple assignments (`import torch as T; C = T.cuda; C.Stream()`), and
through literal getattr/importlib/__import__ calls. Names built from strings at run time are refused
as such (`DynamicAccess`): a candidate is a kernel and a wrapper, and needs none of them.

Why this check carries weight: on the CPU the candidate's kernels run in the worker's own process,
next to the compute watch, the launch counter and the key that MACs the worker's messages. Every
route the red team used to reach them (NumPy or tolist() math, a helper thread, dispatch modes turned
off through run-time names, the watch's counter or allow-list, `evaluation.*` internals, a tensor
subclass, frame walking, ctypes, files) needs code refused here; the OS sandbox and the parent's own
comparison stand behind it.

What runs where: the fan helpers of torch.nn.init (`_calculate_fan_in_and_fan_out`, as copied from
nn.Linear.reset_parameters) are arithmetic on a tensor's shape. They are allowed where the weights are
made: called in a class's `__init__`, or in a method that only such code calls, which is decided from
every mention of its name in the file. Everywhere else (forward, module level, a lambda, a stored
reference) they are private API like the rest.

Not here on purpose: os.kill (of itself), os._exit and sys.exit. Process isolation has to prove
itself on those.
"""

from __future__ import annotations

import ast
import functools
import threading
from dataclasses import dataclass
from typing import Optional, Union

RULES: dict[str, str] = {
    "ForbiddenImport": "threads, subprocesses, signals, sockets, ctypes and heap walking escape the worker's "
    "time limit, isolation or checks",
    "CudaStream": "work on a side stream escapes the harness's synchronisation, so timing and correctness "
    "would not see it",
    "MonkeyPatch": "assigning to attributes of torch, triton, time, numpy, builtins, sys, json or the harness "
    "changes how results are checked or timed",
    "HarnessImport": "the candidate must not import the harness or the reference problem (Model)",
    "FrameIntrospection": "reading interpreter frames or the heap reaches the harness's own objects",
    "DispatchEscape": "turning PyTorch's dispatch modes off hides PyTorch compute from the harness",
    "ProcessSpawn": "starting processes or new sessions escapes the time limit and process-group kill",
    "DynamicAccess": "names built at run time (getattr/setattr with a computed name, __import__, eval, exec, "
    "globals(), __dict__, __subclasses__, sys.modules) reach the harness's objects past every other rule",
    "HostCompute": "NumPy, tolist() or from_numpy math computes outside PyTorch's dispatcher and outside Triton",
    "FileAccess": "a candidate reads and writes no files: the store, the evaluator, /proc and the results are "
    "off limits",
    "ParentSignal": "the parent process is not the candidate's to find or signal",
    "PhaseDetection": "asking whether a CUDA graph is being captured, a profiler runs or torch.compile traces "
    "lets a kernel behave differently when it is checked and when it is timed",
    "GlobalHook": "global module hooks and function modes change how other code (the baselines, the reference) runs",
    "TensorSubclass": "a tensor subclass or __torch_function__/__torch_dispatch__ runs code when its result "
    "is read, after the compute watch ended",
    "PrivateAPI": "private torch internals (torch._C, torch._dynamo, ...) reach the dispatcher and the "
    "harness's own guards",
    "TorchCompile": "torch.compile hands the work to Inductor: the candidate must write its own Triton",
}

FORBIDDEN_MODULES = {
    "subprocess",
    "threading",
    "multiprocessing",
    "ctypes",
    "socket",
    "signal",
    "_thread",
    "concurrent",
    "asyncio",
    "gc",
    "pty",
    "cffi",
    "_ctypes",
    "inspect",
    "traceback",
    "atexit",
    "weakref",
    "code",
    "codeop",
    "runpy",
    "marshal",
    "pickle",
    "copyreg",
    "shelve",
    "mmap",
    "io",
    "_io",
    "pathlib",
    "shutil",
    "tempfile",
    "fcntl",
    "resource",
    "sqlite3",
    "duckdb",
    "chromadb",
    "urllib",
    "http",
    "requests",
    "ssl",
    "select",
    "selectors",
    "sched",
    "faulthandler",
    "tracemalloc",
    "sysconfig",
    "site",
    "numpy",
    "array",
    "store",
    "knowledge",
    "agent",
}
# Pure helpers of weight initialisation (torch.nn.init): allowed where the weights are made, nowhere else.
INIT_HELPERS = frozenset({"torch.nn.init._calculate_fan_in_and_fan_out", "torch.nn.init._calculate_correct_fan"})
PROTECTED_ROOTS = {"torch", "triton", "time", "numpy", "builtins", "evaluation", "sys", "json"}
STREAM_NAMES = {"Stream", "ExternalStream", "StreamContext", "set_stream", "wait_stream", "record_stream"}
FRAME_NAMES = {
    "_getframe",
    "f_back",
    "f_locals",
    "f_globals",
    "tb_frame",
    "currentframe",
    "getouterframes",
    "get_referrers",
    "get_referents",
    "get_objects",
    "settrace",
    "setprofile",
    "_current_frames",
}
DISPATCH_NAMES = {
    "_python_dispatch",
    "_disable_current_modes",
    "_pop_mode",
    "_pop_mode_temporarily",
    "_DisableTorchDispatch",
    "DisableTorchFunction",
    "DisableTorchFunctionSubclass",
    "_ExcludeDispatchKeyGuard",
    "_unset_dispatch_mode",
    "_pop_torch_dispatch_stack",
    "_len_torch_dispatch_stack",
    "_get_dispatch_stack_at",
    "TorchDispatchMode",
    "_DisablePythonDispatcher",
}
DYNAMIC_CALLS = {"eval", "exec", "compile", "globals", "locals", "vars", "__import__", "breakpoint", "memoryview"}
DUNDER_NAMES = {
    "__builtins__",
    "__dict__",
    "__subclasses__",
    "__bases__",
    "__base__",
    "__mro__",
    "__globals__",
    "__code__",
    "__closure__",
    "__getattribute__",
    "__reduce__",
    "__reduce_ex__",
    "__loader__",
    "__spec__",
    "__self__",
    "__func__",
    "__wrapped__",
    "__builtin__",
    "__kwdefaults__",
    "__defaults__",
}
HOST_NAMES = {
    "tolist",
    "numpy",
    "from_numpy",
    "frombuffer",
    "__array__",
    "__array_interface__",
    "__array_struct__",
    "from_dlpack",
    "to_dlpack",
    "__dlpack__",
}
FILE_NAMES = {
    "open",
    "read",
    "write",
    "pipe",
    "pipe2",
    "dup",
    "dup2",
    "fdopen",
    "remove",
    "unlink",
    "rename",
    "renames",
    "replace",
    "makedirs",
    "mkdir",
    "rmdir",
    "removedirs",
    "listdir",
    "scandir",
    "walk",
    "truncate",
    "ftruncate",
    "chmod",
    "chown",
    "lchown",
    "symlink",
    "link",
    "sendfile",
    "mkfifo",
    "mknod",
    "utime",
    "chdir",
    "fchdir",
    "chroot",
    "readlink",
    "lseek",
    "pread",
    "pwrite",
    "writev",
    "readv",
    "openpty",
    "memfd_create",
    "posix_fallocate",
}
PARENT_NAMES = {"getppid", "killpg", "getpgid", "getsid", "pidfd_open"}
PHASE_NAMES = {
    "is_current_stream_capturing",
    "_is_current_stream_capturing",
    "CUDAGraph",
    "graph",
    "graphs",
    "make_graphed_callables",
    "is_compiling",
    "is_dynamo_compiling",
    "profiler",
    "_profiler_enabled",
    "_is_profiler_enabled",
    "kineto_available",
    "is_available_and_capturing",
}
HOOK_NAMES = {
    "register_module_forward_hook",
    "register_module_forward_pre_hook",
    "register_module_full_backward_hook",
    "register_module_full_backward_pre_hook",
    "register_module_backward_hook",
    "register_module_buffer_registration_hook",
    "register_module_module_registration_hook",
    "register_module_parameter_registration_hook",
    "TorchFunctionMode",
    "overrides",
    "addaudithook",
    "register_at_fork",
    "set_default_device",
    "set_default_dtype",
}
SUBCLASS_NAMES = {"_make_subclass", "_make_wrapper_subclass", "as_subclass", "__torch_function__", "__torch_dispatch__"}
TENSOR_CLASSES = {
    "torch.Tensor",
    "torch.nn.Parameter",
    "torch._C.TensorBase",
    "torch._C._TensorBase",
    "torch.nn.parameter.Parameter",
}
SPAWN_NAMES = {
    "system",
    "popen",
    "fork",
    "forkpty",
    "posix_spawn",
    "posix_spawnp",
    "setsid",
    "setpgid",
    "setpgrp",
    "execv",
    "execve",
    "execl",
    "execle",
    "execlp",
    "execlpe",
    "execvp",
    "execvpe",
    "spawnl",
    "spawnle",
    "spawnlp",
    "spawnlpe",
    "spawnv",
    "spawnve",
    "spawnvp",
    "spawnvpe",
}


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    detail: str

    def describe(self) -> str:
        return f"line {self.line}: {self.detail}: {RULES[self.rule]}"


@dataclass(frozen=True)
class StaticReport:
    syntax_error: str | None
    has_model_new: bool
    findings: tuple[Finding, ...]


def defines_model_new(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name) == "ModelNew" for a in node.names
        ):
            return True
    return False


_Scope = Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.GeneratorExp]
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.GeneratorExp)


@functools.lru_cache(maxsize=1)
def _module_attributes() -> frozenset[str]:
    """What nn.Module has (and may call itself: eval() calls train()): never a method only __init__ runs."""
    import torch

    return frozenset(dir(torch.nn.Module))


def _init_functions(tree: ast.Module) -> set[ast.AST]:
    """The functions that run only while a model is built: each class's `__init__`, and each method that
    only such functions mention (`self.reset_parameters()` in `__init__`), by its name anywhere in the file.

    A mention in a lambda, a generator, a nested function, a default or a class body counts as elsewhere,
    and so does one in the method itself. Decorated methods, names starting with "_" and names that
    nn.Module has never qualify.
    """
    enclosing: dict[ast.AST, Optional[ast.AST]] = {}

    def walk(node: ast.AST, scope: Optional[ast.AST]) -> None:
        for field, value in ast.iter_fields(node):
            inner = node if isinstance(node, _SCOPES) and field in ("body", "elt", "generators") else scope
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    enclosing[child] = inner
                    walk(child, inner)

    walk(tree, None)
    init: set[ast.AST] = set()
    methods: dict[str, list[ast.FunctionDef]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for item in cls.body:
            if not isinstance(item, ast.FunctionDef) or item.decorator_list:
                continue
            if item.name == "__init__":
                init.add(item)
            elif not item.name.startswith("_"):
                methods.setdefault(item.name, []).append(item)
    if not init or not methods:
        return init
    module_names = _module_attributes()
    methods = {name: fns for name, fns in methods.items() if name not in module_names}
    mentions: dict[str, list[ast.AST]] = {name: [] for name in methods}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name: object = node.attr
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Constant):
            name = node.value
        else:
            continue
        if isinstance(name, str) and name in mentions:
            mentions[name].append(node)
    grew = True
    while grew:
        grew = False
        for name, fns in methods.items():
            if fns[0] not in init and mentions[name] and all(enclosing.get(m) in init for m in mentions[name]):
                init.update(fns)
                grew = True
    return init


class _Checker(ast.NodeVisitor):
    def __init__(self, problem_module: str | None, tree: ast.Module):
        self.aliases: dict[str, str] = {}
        self.findings: list[Finding] = []
        self.problem_module = problem_module
        self.tree = tree
        self.scopes: list[Optional[_Scope]] = []  # the function (or lambda, generator) being visited
        self.init_calls: set[ast.AST] = set()  # callees of INIT_HELPERS calls made where weights are made
        self._init: Optional[set[ast.AST]] = None

    def in_init(self) -> bool:
        if not self.scopes or self.scopes[-1] is None:
            return False
        if self._init is None:  # only a source that calls an init helper pays for this
            self._init = _init_functions(self.tree)
        return self.scopes[-1] in self._init

    def _scoped(self, scope: Optional[_Scope], nodes: list) -> None:
        self.scopes.append(scope)
        try:
            for n in nodes:
                self.visit(n)
        finally:
            self.scopes.pop()

    def flag(self, rule: str, node: ast.AST, detail: str) -> None:
        self.findings.append(Finding(rule, getattr(node, "lineno", 0), detail))

    # -- name resolution ------------------------------------------------------------------------
    def resolve(self, node: ast.AST) -> str | None:
        """The dotted path an expression names (`T.cuda.Event` -> "torch.cuda.Event"), if known."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            func = self.resolve(node.func) or (node.func.id if isinstance(node.func, ast.Name) else None)
            literal = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            if func in ("importlib.import_module", "__import__") and isinstance(literal, str):
                return literal
            if func == "getattr" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                base = self.resolve(node.args[0])
                return f"{base}.{node.args[1].value}" if base else None
        return None

    def _module_used(self, module: str, node: ast.AST) -> None:
        top = module.split(".")[0]
        if top in FORBIDDEN_MODULES:
            self.flag("ForbiddenImport", node, f"import of {module}")
        if top == "evaluation" or (self.problem_module and top == self.problem_module):
            self.flag("HarnessImport", node, f"import of {module}")
        if "_python_dispatch" in module.split("."):
            self.flag("DispatchEscape", node, f"import of {module}")

    # -- imports and aliases --------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module_used(alias.name, node)
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0:
            self._module_used(module, node)
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            self.aliases[alias.asname or alias.name] = full
            if node.level == 0:
                self._module_used(full, node)
            self._names(alias.name, full, node)
            if alias.name == "Model":
                self.flag("HarnessImport", node, f"import of Model from {module or '.'}")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        resolved = self.resolve(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and resolved:
                self.aliases[target.id] = resolved
            self._target(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, node)
        self.generic_visit(node)

    def _target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._target(elt, node)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            base = self._protected(target.value)
            if base:
                what = f"{base}.{target.attr}" if isinstance(target, ast.Attribute) else f"{base}[...]"
                self.flag("MonkeyPatch", node, f"assignment to {what}")

    def _protected(self, node: ast.AST) -> str | None:
        path = self.resolve(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" and node.args:
            path = self.resolve(node.args[0])
        if path and path.split(".")[0] in PROTECTED_ROOTS:
            return path
        return None

    # -- uses -----------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        callee = self.resolve(node.func) or name
        if name in ("setattr", "delattr") and node.args:
            base = self._protected(node.args[0])
            if base:
                self.flag("MonkeyPatch", node, f"{name}() on {base}")
        literal = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        if callee in ("importlib.import_module", "__import__") and isinstance(literal, str):
            self._module_used(literal, node)
        elif callee == "importlib.import_module":
            self.flag("DynamicAccess", node, "importlib.import_module() of a name built at run time")
        if name in ("getattr", "setattr", "delattr", "hasattr"):
            attr = node.args[1] if len(node.args) >= 2 else None
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                base = self.resolve(node.args[0])
                self._names(attr.value, f"{base}.{attr.value}" if base else None, node)
            else:
                self.flag("DynamicAccess", node, f"{name}() with a name built at run time")
        if name in DYNAMIC_CALLS:
            self.flag("DynamicAccess", node, f"call of {name}()")
        if name == "type" and len(node.args) == 3:
            self.flag("DynamicAccess", node, "a class built at run time with type(name, bases, dict)")
        if callee in INIT_HELPERS and self.in_init():
            self.init_calls.add(node.func)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "open" and node.id not in self.aliases:
            self.flag("FileAccess", node, "use of open()")
        if node.id in DUNDER_NAMES:
            self.flag("DynamicAccess", node, f"use of {node.id}")
        path = self.aliases.get(node.id)
        if path in INIT_HELPERS and isinstance(node.ctx, ast.Load) and node not in self.init_calls:
            self.flag("PrivateAPI", node, f"use of {path} outside __init__")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._names(node.attr, self.resolve(node), node)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            path = self.resolve(base)
            if path in TENSOR_CLASSES:
                self.flag("TensorSubclass", node, f"class {node.name} derives from {path}")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> None:
        if node.name in SUBCLASS_NAMES:
            self.flag("TensorSubclass", node, f"definition of {node.name}")
        for d in node.decorator_list:  # decorators, defaults and annotations run where the def is
            self.visit(d)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        self._scoped(node, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._scoped(node, [node.args, node.body])

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:  # runs when it is consumed, not where made
        self._scoped(node, [node.elt, *node.generators])

    def _names(self, name: str, path: str | None, node: ast.AST) -> None:
        root = path.split(".")[0] if path else None
        if name in STREAM_NAMES or (name == "stream" and root == "torch"):
            self.flag("CudaStream", node, f"use of {path or name}")
        if name in FRAME_NAMES:
            self.flag("FrameIntrospection", node, f"use of {path or name}")
        if name in DISPATCH_NAMES:
            self.flag("DispatchEscape", node, f"use of {path or name}")
        if name in SPAWN_NAMES and root in ("os", "posix", "pty"):
            self.flag("ProcessSpawn", node, f"use of {path}")
        if name in HOST_NAMES:
            self.flag("HostCompute", node, f"use of {path or name}")
        if (
            name in FILE_NAMES
            and root in ("os", "posix", "io", "_io", "builtins", "torch")
            and (root != "torch" or name in ("save", "load"))
        ):
            self.flag("FileAccess", node, f"use of {path}")
        if name in ("save", "load") and root == "torch" and path in ("torch.save", "torch.load"):
            self.flag("FileAccess", node, f"use of {path}")
        if name in PARENT_NAMES and root in ("os", "posix"):
            self.flag("ParentSignal", node, f"use of {path}")
        if name in PHASE_NAMES and root == "torch":
            self.flag("PhaseDetection", node, f"use of {path}")
        if name in HOOK_NAMES and (root in ("torch", "sys") or name.startswith("register_module_")):
            self.flag("GlobalHook", node, f"use of {path or name}")
        if name in SUBCLASS_NAMES:
            self.flag("TensorSubclass", node, f"use of {path or name}")
        if name in DUNDER_NAMES:
            self.flag("DynamicAccess", node, f"use of {path or name}")
        if name == "modules" and root == "sys":
            self.flag("DynamicAccess", node, "use of sys.modules")
        if path in INIT_HELPERS:
            if node not in self.init_calls and not isinstance(node, ast.ImportFrom):  # an import is no use
                self.flag("PrivateAPI", node, f"use of {path} outside __init__")
        elif root == "torch" and name.startswith("_") and not name.startswith("__"):
            self.flag("PrivateAPI", node, f"use of {path}")
        if root == "torch" and name == "compile":
            self.flag("TorchCompile", node, f"use of {path}")
        if root == "builtins" and name in DYNAMIC_CALLS | {"open"}:
            self.flag("DynamicAccess", node, f"use of {path}")


# CPython 3.11's parser is not safe to enter from two threads at once ("SystemError: AST constructor
# recursion depth mismatch"), and an executor checks a batch of candidates in threads.
_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, one thread at a time."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename)


def check_source(source: str, problem_module: str | None = None) -> StaticReport:
    """Parse and check a candidate. `problem_module` is the reference file's stem (not importable)."""
    try:
        tree = parse(source)
    except SyntaxError as exc:
        return StaticReport(f"line {exc.lineno}: {exc.msg}", False, ())
    checker = _Checker(problem_module, tree)
    checker.visit(tree)
    unique = {(f.rule, f.line, f.detail): f for f in checker.findings}
    return StaticReport(None, defines_model_new(tree), tuple(sorted(unique.values(), key=lambda f: f.line)))
