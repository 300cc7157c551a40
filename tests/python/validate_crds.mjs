// Validates custom resources with the @kubernetes-models packages of their operators, whose
// validate() is generated from the operator's CRD schema: PodMonitor and PrometheusRule with
// @kubernetes-models/prometheus-operator, ScaledObject with @kubernetes-models/keda. Used by
// test_deploy_manifests.py and test_helm_chart.py.
//
//   node validate_crds.mjs PACKAGE_DIR... < documents.json
//
// Each PACKAGE_DIR is an installed package (scripts/tools.sh prints them); they are imported by
// path because they live in a cache folder, not next to this script. A document's model is
// PACKAGE_DIR/<group>/<version>/<Kind>.js in the first package that has it; a document no package
// has a model for is an error, not a pass. Standard input is a JSON array of documents; standard
// output is a JSON array with, for each document in the same order, its errors as
// "field.path[0]: message" strings (empty when it is valid). Exit status: 0 all valid, 1 some
// document invalid, 2 the validator could not run.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

function fail(message) {
  process.stderr.write(`validate_crds: ${message}\n`);
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

function errorsOf(Model, doc) {
  try {
    new Model(doc).validate();
    return [];
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    // The generated code reports an error once per schema layer it passes through (a nullable
    // wrapper and the type it wraps): one line each is enough.
    return [...new Set(e.errors.map((err) => `${fieldPath(doc, err.instancePath)}: ${describe(err)}`))];
  }
}

const packageDirs = process.argv.slice(2);
if (packageDirs.length === 0) fail("usage: node validate_crds.mjs PACKAGE_DIR... < documents.json");

const models = new Map();
async function modelOf(doc) {
  const key = `${doc.apiVersion} ${doc.kind}`;
  if (!models.has(key)) {
    const [group, version] = String(doc.apiVersion).split("/");
    const file = packageDirs
      .map((dir) => join(dir, group, version ?? "", `${doc.kind}.js`))
      .find((candidate) => existsSync(candidate));
    let Model = null;
    if (file) {
      try {
        Model = (await import(pathToFileURL(file).href))[doc.kind];
      } catch (e) {
        fail(`cannot load the ${doc.kind} model from ${file}: ${e.message}`);
      }
    }
    models.set(key, Model);
  }
  return models.get(key);
}

let documents;
try {
  documents = JSON.parse(readFileSync(0, "utf8"));
} catch (e) {
  fail(`standard input is not JSON: ${e.message}`);
}
if (!Array.isArray(documents)) fail("standard input must be a JSON array of documents");

const results = [];
for (const doc of documents) {
  const Model = await modelOf(doc);
  results.push(
    Model ? errorsOf(Model, doc) : [`(the document): no model for ${doc.apiVersion} ${doc.kind} in ${packageDirs.join(", ")}`],
  );
}
process.stdout.write(`${JSON.stringify(results, null, 1)}\n`);
process.exitCode = results.some((errors) => errors.length > 0) ? 1 : 0;
