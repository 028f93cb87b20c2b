"""Compose a study config with Hydra and turn every composition failure into one clear ConfigError."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import re
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from orchestrator.config import compose_cache, keys, noise_floor, prompt_length, schema
from orchestrator.config.catalog import line
from orchestrator.config.locations import CONF_DIR as CONF_DIR  # re-exported: their home is locations.py
from orchestrator.config.locations import CONFIG_NAME as CONFIG_NAME
from orchestrator.config.locations import PROJECT_ROOT as PROJECT_ROOT
from orchestrator.config.search import overrides_for
from orchestrator.errors import ConfigError, did_you_mean


def user_cache_dir() -> Path:
    """Where builds and facts derived from content-addressed images are kept between runs (scripts/common.sh
    uses the same rule): ORCHESTRATOR_CACHE_DIR, else XDG_CACHE_HOME/orchestrator, else ~/.cache/orchestrator."""
    explicit = os.environ.get("ORCHESTRATOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator"


def compose(overrides: list[str], dirs: list[Path] | None = None) -> DictConfig:
    """Compose conf/config.yaml with command-line overrides (the same composition `run` does), the user's
    config dirs (config/search.py) searched after the project's conf/."""
    composed, problems = compose_collecting(overrides, dirs)
    if problems:
        raise ConfigError(problems)
    return composed


def compose_collecting(overrides: list[str], dirs: list[Path] | None = None) -> tuple[DictConfig, list[str]]:
    """The config composed from the overrides that compose, and one line for each that does not (it does
    not parse, names nothing, or has a wrong type): every command-line problem at once, not only the first
    one Hydra meets. A problem of a config file raises at once (no override to leave out)."""
    schema.register_configs()  # a kept config may hold `${on_off:X}`, resolved after it is read
    keyed, run_dirs = compose_cache.run_dirs(overrides)
    cache, name = user_cache_dir() / "composed", compose_cache.key(keyed, dirs or [])
    if (composed := compose_cache.load(cache, name)) is not None:  # composed before, from the same files
        return compose_cache.with_run_dirs(composed, run_dirs), []
    parsed = [(text, _unparsable(text)) for text in overrides]  # each parsed once (a parser is made per call)
    problems = [problem for _, problem in parsed if problem]
    kept = [text for text, problem in parsed if not problem]
    while True:
        try:
            composed = _compose([*kept, *overrides_for(dirs or [])], dirs or [])
            if not problems:
                compose_cache.store(cache, name, composed)
            return composed, problems
        except ConfigError as exc:
            culprit = _culprit(exc, kept)
            if culprit is None:  # a config file's: Hydra names its first problem only
                loose = _compose_untyped([*kept, *overrides_for(dirs or [])], dirs or [])
                if loose is None or not _names(typed_collecting(loose)[1], keys.refused(exc)):
                    raise ConfigError([*problems, *exc.problems]) from exc  # only what Hydra said, then
                return loose, problems  # typing it names every problem of the files, each where it is written
            problems += exc.problems
            kept.remove(culprit)


def _names(found: list[str], refused: str | None) -> bool:
    """Whether the problems found typing the untyped composition include the key Hydra refused (else Hydra's
    own line is kept: a problem is never traded for others)."""
    if refused is None:
        return False
    parent, _, key = refused.rpartition(".")
    return any(p.startswith(f"{refused}:") or f"unknown key '{key}' in {parent or 'the top level'} " in p
               or f"unknown key '{key}' in {parent or 'the top level'}." in p for p in found)


def _compose_untyped(overrides: list[str], dirs: list[Path]) -> DictConfig | None:
    """The same composition with the schema's node (`config_schema`) and the Hydra plugins' (hydra.sweeper,
    hydra.launcher) as plain defaults, untyped, so a config file's keys are all kept, right or wrong, for
    `typed_collecting` to judge; None where it does not compose that way either."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    plugins = [(entry, entry.node) for group in ("sweeper", "launcher")
               for entry in store.repo.get("hydra", {}).get(group, {}).values()]
    store.store(name="config_schema", node=OmegaConf.to_container(OmegaConf.structured(schema.Config)))
    for entry, node in plugins:
        entry.node = OmegaConf.create(OmegaConf.to_container(node))
    try:
        return _compose(overrides, dirs)
    except ConfigError:
        return None
    finally:
        for entry, node in plugins:
            entry.node = node
        schema.register_configs()


def _compose(overrides: list[str], dirs: list[Path]) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return hydra_compose(CONFIG_NAME, overrides=overrides, return_hydra_config=True)
    except Exception as exc:  # Hydra raises several unrelated types; all are config problems
        raise explain(exc, dirs) from exc
    finally:
        GlobalHydra.instance().clear()


def _unparsable(text: str) -> str | None:
    """The line for an override Hydra's grammar refuses, naming it (Hydra's own message does not)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        OverridesParser.create().parse_override(text)
    except Exception as exc:  # Hydra's grammar errors
        reason = " ".join(str(exc).split(" See https://", 1)[0].split())
        return (f"override '{text}' does not parse ({reason}): write KEY=VALUE, and quote a value that holds "
                "brackets, braces, '=', ',' or spaces (KEY='\"VALUE\"')")
    return None


def _culprit(error: ConfigError, overrides: list[str]) -> str | None:
    """The override a composition error is about: Hydra names its key, or the group option it could not
    find (`protocol/smok`). Not one that picks a file with a problem inside (`In 'study/mine'`): that file's
    problem is the user's to fix, and leaving the override out would judge another study."""
    text = " ".join(str(cause) for cause in (error.__cause__, getattr(error.__cause__, "__cause__", None)) if cause)
    for override in overrides:
        key, _, value = override.partition("=")
        key = key.lstrip("+~")
        if (f"override {override}" in text or f"override '{key}'" in text
                or re.search(rf"Could not (?:find|load) '{re.escape(key.split('@', 1)[0])}/{re.escape(value)}'",
                             text)):
            return override
    return None


def to_typed(cfg: DictConfig) -> schema.Config:
    """Validate a composed config (again, strictly) and return the dataclass tree."""
    typed, problems = typed_collecting(cfg)
    if problems:
        raise ConfigError(problems)
    return typed


def typed_collecting(cfg: DictConfig) -> tuple[schema.Config, list[str]]:
    """The dataclass tree of a composed config, and one line for each key it cannot take (unknown, or of a
    wrong type), those keys left at their defaults so that the checks after this one still run."""
    plain = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"]) if "hydra" in cfg else cfg.copy()
    written = keys.sources(cfg)
    unknown = keys.unknown(OmegaConf.to_container(plain), schema.Config, "", written)
    for where, _ in unknown:
        _drop(plain, where)
    problems = [problem for _, problem in unknown] + keys.plugins_unknown(cfg, written)
    while True:
        try:
            typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema.Config), plain))
            break
        except Exception as exc:
            error = exc.__cause__ if isinstance(exc.__cause__, ConfigError) else explain(exc, written=written)
            full_key = getattr(exc, "full_key", None)
            if not full_key or not _drop(plain, full_key):
                raise ConfigError([*problems, *error.problems]) from exc
            problems += error.problems
    assert isinstance(typed, schema.Config)
    resolve_arm_paths(typed)
    noise_floor.add_copy(typed)
    return typed, problems


def _drop(node: DictConfig, dotted: str) -> bool:
    """Remove a key (dotted path) from a config; False when it is not there."""
    parent_path, _, key = dotted.rpartition(".")
    parent = OmegaConf.select(node, parent_path) if parent_path else node
    if not isinstance(parent, DictConfig) or key not in parent:
        return False
    with open_dict(parent):
        del parent[key]
    return True


def resolve_arm_paths(typed: schema.Config) -> None:
    """Relative paths an arm names (its build context, its mounts' host folders) become absolute: beside the
    arm files of the user's config dirs (DIR/arm/PATH) when they exist there, else against the project root
    (build contexts: the project's own arms/) or the working directory (host folders, as typed on a
    command line). The record then names what was used."""
    arm_dirs = [Path(d) / "arm" for d in typed.config_dirs]
    for arm in typed.arms.values():
        if arm.build.context and not Path(arm.build.context).is_absolute():
            arm.build.context = str(_first_existing(arm.build.context, [*arm_dirs, PROJECT_ROOT]))
        for volume in arm.volumes:
            if not Path(volume.host).is_absolute():
                volume.host = str(_first_existing(volume.host, [*arm_dirs, Path.cwd()]))


def _first_existing(relative: str, roots: list[Path]) -> Path:
    found = next((root / relative for root in roots if (root / relative).exists()), roots[-1] / relative)
    return found.resolve()


_FILE = "write it in a config file of a --config-dir DIR"
_NEW_ENTRY = {
    "ArmConfig": "add an arm from a template, +arm@arms.NAME=TEMPLATE, then set its keys (arms.NAME.KEY=VALUE)",
    "PromptConfig": "write it in a prompt set, DIR/prompts/SET.yaml, and pass --config-dir DIR prompts=SET",
    "PhaseConfig": "write it in a protocol, DIR/protocol/NAME.yaml, and pass --config-dir DIR protocol=NAME",
    "ScratchConfig": "write it in an arm file, DIR/arm/NAME.yaml (scratch: {NAME: {container: PATH}}), and "
                     "pass --config-dir DIR arm@arms.ARM=NAME",
}
_YAML_WORDS = {"True": ("on", "yes", "true"), "False": ("off", "no", "false"), "None": ("null", "~")}
_YAML_VALUE = {"True": "the boolean true", "False": "the boolean false", "None": "null (no name)"}
_TYPE_WORDS = {"Float": "a number, e.g. 0.05", "Integer": "a whole number, e.g. 8", "Boolean": "true or false"}


def explain(exc: BaseException, dirs: list[Path] | None = None, written: Callable[[str], str] | None = None
            ) -> ConfigError:
    """Map a Hydra/OmegaConf failure to a one-line message naming the key, its source and the choices
    (`written`: where a key of the composed config was written, for a failure typing it)."""
    if isinstance(exc, ConfigError):
        return exc
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    text = str(exc)
    source = _source_of(text, dirs or [])
    named = re.search(r"full_key: (\S+)", text)
    full_key = getattr(cause, "full_key", None) or (named.group(1) if named else None)
    first_line = str(cause).splitlines()[0] if str(cause) else type(cause).__name__

    missing = re.search(r"Could not (?:find|load) '([^']+)/([^']+)'", text)
    if missing:
        group, name = missing.groups()
        choices = group_options(group, dirs or [])
        if source == "in conf/config.yaml":  # Hydra names the primary config for any override: find its file
            source = _override_source(group, name, dirs or [])
        return ConfigError(f"unknown {group} '{name}' ({source}).{did_you_mean(name, choices)}")

    if source == "in the composed config" and full_key and written and written(full_key):
        source = written(full_key)
    unknown = re.search(r"Key '([^']+)' not in '([^']+)'", text if "full_key" in text else first_line)
    if unknown:
        key = unknown.group(1)
        parent = full_key.rsplit(".", 1)[0] if full_key and "." in full_key else "the top level"
        given = re.search(r"Could not override '([^']+)'", text)
        if given and not (full_key or "").startswith(given.group(1)):  # a key inside a value given whole
            parent = given.group(1)
        block = keys.schema_of(exc)
        fields = [f.name for f in dataclasses.fields(block)] if block else []
        return ConfigError(f"unknown key '{key}' in {parent} ({source}).{did_you_mean(key, fields)}")

    if full_key and "not in struct" in first_line:  # Hydra: a key the config does not have yet
        close = difflib.get_close_matches(full_key.rsplit(".", 1)[-1], keys.siblings(exc), n=1, cutoff=0.6)
        if close:  # a typo of a key beside it: its fix first, not how to add the typo
            return ConfigError(f"{full_key} is not in the config ({source}). Did you mean '{close[0]}'? To add a "
                               f"new key instead, write '+{full_key}=VALUE'")
        return ConfigError(f"{full_key} is not in the config ({source}): to add a new key, write "
                           f"'+{full_key}=VALUE'")
    entry = re.search(r"dict is not a subclass of (\w+)", first_line)
    if entry:  # OmegaConf types a map's new entry only from a config file
        given = re.search(r"merging override (.+)", text)
        return ConfigError(f"{given.group(1) if given else full_key}: a new {entry.group(1)} entry cannot be given "
                           f"whole on the command line (Hydra cannot type it); {_NEW_ENTRY.get(entry.group(1), _FILE)}")
    yaml_word = re.search(r"Key (True|False|None) \(\w+\) is incompatible with \(str\)|Incompatible key type "
                          r"'(NoneType)'", first_line)
    if yaml_word and full_key:  # YAML 1.1 reads off, yes, null... unquoted as a boolean or null, never a name
        value = yaml_word.group(1) or "None"
        parent = full_key.rsplit(".", 1)[0] if yaml_word.group(1) and "." in full_key else full_key
        words = _YAML_WORDS[value]
        return ConfigError(f"{parent}: YAML read a name written {', '.join(words[:-1])} or {words[-1]} as "
                           f"{_YAML_VALUE[value]}, but names of arms and prompts are strings: quote it, e.g. "
                           f"'{words[0]}' ({source})")
    if full_key:
        wanted = re.search(r"could not be converted to (\w+)|is not a valid (bool)", first_line)
        kind = wanted and (wanted.group(1) or "Boolean")
        fix = f"; give {_TYPE_WORDS.get(kind, kind)}" if kind else ""
        return ConfigError(f"{full_key}: {first_line} ({source}){fix}")
    return ConfigError(" ".join(text.split()) or type(exc).__name__)


def _source_of(text: str, dirs: list[Path]) -> str:
    found = re.search(r"In '([^']+)'", text)
    if found:
        name = f"{found.group(1)}.yaml"
        # Hydra names the config, not its folder: the user's dirs win over the project's, as in the search
        for root in (*reversed(dirs), CONF_DIR):
            if (root / name).is_file():
                return f"in {root / name}" if root != CONF_DIR else f"in conf/{name}"
        return f"in conf/{name}"
    if "override" in text:
        return "on the command line"
    return "in the composed config"


def _override_source(group: str, name: str, dirs: list[Path]) -> str:
    """The config file whose defaults list picks `name` for `group` (`- override /prompts: NAME`); none does:
    the command line (conf/config.yaml's own choices all exist)."""
    picks = re.compile(rf"^\s*-\s*(?:override\s+)?/?{re.escape(group)}(?:@\S+)?\s*:\s*{re.escape(name)}\s*(?:#.*)?$",
                       re.MULTILINE)
    for root in (*reversed(dirs), CONF_DIR):
        for path in sorted(root.rglob("*.yaml")):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if picks.search(path.read_text(encoding="utf-8")):
                    return f"in {path}" if root != CONF_DIR else f"in conf/{path.relative_to(CONF_DIR)}"
    return "on the command line"


def group_options(group: str, dirs: list[Path]) -> list[str]:
    """The choices of a config group across the project's conf/ and the user's dirs."""
    return sorted({p.stem for root in (CONF_DIR, *dirs) for p in (root / group).glob("*.yaml")})


def resolve_prompts(prompt_set: schema.PromptSetConfig, config_dirs: list[str] | None = None) -> dict[str, str]:
    """Prompt id -> exact text. A relative file is looked up in the prompts/ folder of each user config dir
    (in search order), then the project's conf/prompts; an absolute one is read as it is."""
    folders = [*(Path(d) / "prompts" for d in config_dirs or []), CONF_DIR / "prompts"]
    texts: dict[str, str] = {}
    problems = []
    for prompt_id, prompt in prompt_set.prompts.items():
        if (prompt.text is None) == (prompt.file is None):
            problems.append(f"prompt '{prompt_id}' in set '{prompt_set.name}' needs exactly one of text or file")
            continue
        text = prompt.text
        if prompt.file is not None:
            given = Path(prompt.file)
            candidates = [given] if given.is_absolute() else [folder / given for folder in folders]
            path = next((c for c in candidates if c.is_file()), None)
            if path is None:
                problems.append(f"prompt '{prompt_id}': file {prompt.file} not found (looked in "
                                f"{', '.join(str(c.parent) for c in candidates)})")
                continue
            try:
                text = path.read_text(encoding=prompt.encoding)
            except LookupError:
                problems.append(line("file", f"prompts.prompts.{prompt_id}.encoding", prompt.encoding,
                                     "an encoding Python knows", "use e.g. utf-8, latin-1 or utf-16"))
                continue
            except (OSError, UnicodeDecodeError) as exc:
                reason = (f"is not {prompt.encoding} text" if isinstance(exc, UnicodeDecodeError)
                          else f"cannot be read ({exc.strerror})")
                problems.append(line("file", f"prompts.prompts.{prompt_id}.file", str(path), f"a readable "
                                     f"{prompt.encoding} text file; {path} {reason}", "re-encode it (e.g. iconv "
                                     "-t UTF-8), name its encoding (prompts.prompts.ID.encoding), or fix its "
                                     "permissions"))
                continue
        assert text is not None
        if prompt.repeat_to_chars:
            if not text:
                problems.append(f"prompt '{prompt_id}': cannot repeat an empty text")
                continue
            text = (text * (prompt.repeat_to_chars // len(text) + 1))[: prompt.repeat_to_chars]
        if prompt.length_tokens and text:  # run/send/prompt_length.py sends the first length_tokens of it
            text = prompt_length.source_text(text, prompt.length_tokens)
        texts[prompt_id] = text
    if problems:
        raise ConfigError(problems)
    return texts
