// tests/deploy/k8s-schema/validate.mjs: validates Kubernetes manifests against the API's OpenAPI schemas (kubernetes-models).
//
// usage: node validate.mjs FILE...   (multi-document YAML; run with NODE_PATH unset, from a
// directory whose node_modules holds package.json's packages: see test_k8s_schema.sh)
// Each object is checked by the validator kubernetes-models generated from the Kubernetes
// API's published OpenAPI definitions for its apiVersion and kind: types, formats, enums,
// required fields. Those schemas do not close objects (the API server reports unknown
// fields itself), so unknown keys are test_manifests.py's job. Prints one line per object
// and exits 1 when any object is invalid or of a kind the package does not know.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

async function modelFor(apiVersion, kind) {
	try { // the package's layout is GROUP/VERSION/KIND, and v1/KIND for the core group
		const mod = await import(`kubernetes-models/${apiVersion}/${kind}`);
		return mod[kind];
	} catch {
		return null;
	}
}

let bad = 0;
for (const file of process.argv.slice(2)) {
	for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
		const obj = doc.toJS();
		if (obj === null)
			continue;
		if (doc.errors.length > 0) {
			console.log(`${file}: YAML: ${doc.errors[0].message}`);
			bad++;
			continue;
		}
		const what = `${file}: ${obj.apiVersion} ${obj.kind} ${obj.metadata?.name}`;
		const Model = obj.kind === "Kustomization" ? null : await modelFor(obj.apiVersion, obj.kind);
		if (Model === null) {
			console.log(`${what}: no schema for this apiVersion and kind`);
			bad++;
			continue;
		}
		try {
			new Model(obj).validate();
			console.log(`${what}: valid`);
		} catch (e) {
			console.log(`${what}: INVALID: ${e.message}`);
			bad++;
		}
	}
}
process.exit(bad === 0 ? 0 : 1);
