"""Rewrites the client setup of Google's managedwriter integration_test.go (read from the Go
module cache) so that it calls the options of emulator_setup_test.go. Everything else in the file
is kept byte for byte. Each replaced text must occur exactly once: a new client version that
changes the setup fails here instead of running against Google's service.

usage: patch.py SOURCE DEST
"""
import sys

REPLACEMENTS = [
    # the token source (a key file or ADC) and the write client
    (
        '\tts := testutil.TokenSource(ctx, "https://www.googleapis.com/auth/bigquery")\n'
        "\tif ts == nil {\n"
        '\t\tt.Skip("Integration tests skipped. See CONTRIBUTING.md for details")\n'
        "\t}\n"
        "\topts = append(opts, option.WithTokenSource(ts))\n"
        "\tclient, err := NewClient(ctx, projID, opts...)\n",
        "\tclient, err := NewClient(ctx, projID, emulatorWriteOptions(opts)...)\n",
    ),
    # the REST client
    (
        "\tbqClient, err := bigquery.NewClient(ctx, projID, opts...)\n",
        "\tbqClient, err := bigquery.NewClient(ctx, projID, emulatorRESTOptions(opts)...)\n",
    ),
]


def main(source: str, dest: str) -> None:
    text = open(source, encoding="utf-8").read()
    for old, new in REPLACEMENTS:
        count = text.count(old)
        if count != 1:
            sys.exit(f"patch.py: expected one occurrence in {source}, found {count}:\n{old}")
        text = text.replace(old, new)
    open(dest, "w", encoding="utf-8").write(text)


if __name__ == "__main__":
    main(*sys.argv[1:])
