def parse_ini(text):
    result = {}
    section = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith((";", "#")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            if not section:
                raise ValueError(f"line {number}: empty section name")
            result.setdefault(section, {})
            continue
        if "=" in line:
            key, value = line.split("=", 1)
            key = key.strip().lower()
            if not key:
                raise ValueError(f"line {number}: empty key")
            result.setdefault(section, {})[key] = value.strip()
            continue
        raise ValueError(f"line {number}: cannot parse {raw!r}")
    return result
