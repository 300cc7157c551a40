// Validates PodMonitor documents with @kubernetes-models/prometheus-operator, whose validate() is
// generated from the Prometheus operator's CRD schema. Used by test_deploy_manifests.py.
//
//   node validate_podmonitor.mjs PACKAGE_DIR < documents.json
//
// PACKAGE_DIR is the installed package (scripts/tools.sh prints it as `podmonitor_models=`); it is
// imported by path because the package lives in a cache folder, not next to this script. Standard
// input is a JSON array of documents; standard output is a JSON array with, for each document in
// the same order, its errors as "field.path[0]: message" strings (empty when it is valid). Exit
// status: 0 all valid, 1 some document invalid, 2 the validator could not run.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

function fail(message) {
  process.stderr.write(`validate_podmonitor: ${message}\n`);
  process.exit(2);
}

// The same notation as test_deploy_manifests.py's field paths: an array index in brackets, an
// object key after a dot, whatever characters the key has (a label key can be all digits).
function fieldPath(doc, instancePath) {
  let path = "";
  let node = doc;
  for (const raw of instancePath.split("/").slice(1)) {
    const key = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    path += Array.isArray(node) ? `[${key}]` : `.${key}`;
    node = node?.[key];
  }
  return path.replace(/^\./, "") || "(the document)";
}

function describe(error) {
  const allowed = error.params?.allowedValues;
  return allowed ? `${error.message}: ${JSON.stringify(allowed)}` : error.message;
}

function errorsOf(PodMonitor, doc) {
  try {
    new PodMonitor(doc).validate();
    return [];
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    // The generated code reports an error once per schema layer it passes through (a nullable
    // wrapper and the type it wraps): one line each is enough.
    return [...new Set(e.errors.map((err) => `${fieldPath(doc, err.instancePath)}: ${describe(err)}`))];
  }
}

const [packageDir] = process.argv.slice(2);
if (!packageDir) fail("usage: node validate_podmonitor.mjs PACKAGE_DIR < documents.json");

let PodMonitor;
try {
  const file = join(packageDir, "monitoring.coreos.com", "v1", "PodMonitor.js");
  ({ PodMonitor } = await import(pathToFileURL(file).href));
} catch (e) {
  fail(`cannot load the PodMonitor model from ${packageDir}: ${e.message}`);
}

let documents;
try {
  documents = JSON.parse(readFileSync(0, "utf8"));
} catch (e) {
  fail(`standard input is not JSON: ${e.message}`);
}
if (!Array.isArray(documents)) fail("standard input must be a JSON array of documents");

const results = documents.map((doc) => errorsOf(PodMonitor, doc));
process.stdout.write(`${JSON.stringify(results, null, 1)}\n`);
process.exitCode = results.some((errors) => errors.length > 0) ? 1 : 0;
