//! The OpenAPI document is the contract: the JSON the service answers must validate against its
//! schemas.
//!
//! The checker below covers the JSON Schema keywords the document uses (`$ref`, `type` with
//! type lists, `properties`, `required`, `additionalProperties: false`, `items`, `enum`,
//! `minimum`, `maximum`, `minLength`, `maxLength`); a test fails if the document starts using
//! another, so the checker cannot silently accept what it does not understand. That keeps the
//! contract test free of a large validator dependency.

use serde_json::Value;

use pilot_election::api::OPENAPI_YAML;

const KNOWN: &[&str] = &[
    "$ref",
    "oneOf",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "description",
];

pub struct Spec {
    doc: Value,
}

impl Spec {
    pub fn load() -> Spec {
        let doc: Value = serde_norway::from_str(OPENAPI_YAML).expect("openapi.yaml parses");
        Spec { doc }
    }

    /// The whole document.
    pub fn doc(&self) -> &Value {
        &self.doc
    }

    pub fn has(&self, method: &str, path: &str) -> bool {
        self.doc["paths"][path][method].is_object()
    }

    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let ptr = r.strip_prefix('#').expect("local $ref");
                self.resolve(
                    self.doc
                        .pointer(ptr)
                        .unwrap_or_else(|| panic!("dangling {r}")),
                )
            }
            None => schema,
        }
    }

    /// The JSON schema of the answer `status` to `method path`.
    fn response_schema(&self, method: &str, path: &str, status: u16) -> &Value {
        let op = &self.doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not in openapi.yaml");
        let resp = op["responses"]
            .get(status.to_string())
            .unwrap_or_else(|| panic!("{method} {path}: status {status} is not in openapi.yaml"));
        let resp = self.resolve(resp);
        resp.pointer("/content/application~1json/schema")
            .unwrap_or_else(|| panic!("{method} {path} {status}: no JSON schema"))
    }

    /// Panics with the reasons when `body` breaks the spec.
    pub fn check(&self, method: &str, path: &str, status: u16, body: &Value) {
        let schema = self.response_schema(method, path, status);
        let mut errors = Vec::new();
        self.validate(schema, body, "$", &mut errors);
        assert!(
            errors.is_empty(),
            "{method} {path} {status}: {body}\nbreaks the spec: {errors:?}"
        );
    }

    /// Panics when `v` breaks the named schema of `components/schemas`.
    pub fn check_schema(&self, name: &str, v: &Value) {
        let schema = &self.doc["components"]["schemas"][name];
        assert!(schema.is_object(), "no schema {name}");
        let mut errors = Vec::new();
        self.validate(schema, v, "$", &mut errors);
        assert!(errors.is_empty(), "{v} breaks {name}: {errors:?}");
    }

    fn validate(&self, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
        let schema = self.resolve(schema);
        let Some(obj) = schema.as_object() else {
            return;
        };
        for k in obj.keys() {
            assert!(
                KNOWN.contains(&k.as_str()),
                "the checker does not know `{k}`"
            );
        }
        if let Some(branches) = obj.get("oneOf").and_then(Value::as_array) {
            let matching = branches
                .iter()
                .filter(|b| {
                    let mut errs = Vec::new();
                    self.validate(b, v, at, &mut errs);
                    errs.is_empty()
                })
                .count();
            if matching != 1 {
                errors.push(format!(
                    "{at}: {v} matches {matching} of the {} oneOf branches, not exactly one",
                    branches.len()
                ));
            }
        }
        if let Some(t) = obj.get("type") {
            let types: Vec<&str> = match t {
                Value::String(s) => vec![s.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            let ok = types.iter().any(|t| match *t {
                "null" => v.is_null(),
                "boolean" => v.is_boolean(),
                "integer" => v.is_u64() || v.is_i64(),
                "number" => v.is_number(),
                "string" => v.is_string(),
                "array" => v.is_array(),
                "object" => v.is_object(),
                other => panic!("unknown type {other}"),
            });
            if !ok {
                errors.push(format!("{at}: {v} is not {types:?}"));
                return;
            }
        }
        if let Some(e) = obj.get("enum").and_then(Value::as_array) {
            if !e.contains(v) {
                errors.push(format!("{at}: {v} not in {e:?}"));
            }
        }
        if let (Some(min), Some(n)) = (obj.get("minimum").and_then(Value::as_f64), v.as_f64()) {
            if n < min {
                errors.push(format!("{at}: {n} < {min}"));
            }
        }
        if let (Some(max), Some(n)) = (obj.get("maximum").and_then(Value::as_f64), v.as_f64()) {
            if n > max {
                errors.push(format!("{at}: {n} > {max}"));
            }
        }
        if let Some(s) = v.as_str() {
            let len = s.chars().count() as u64;
            if obj
                .get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len < m)
                || obj
                    .get("maxLength")
                    .and_then(Value::as_u64)
                    .is_some_and(|m| len > m)
            {
                errors.push(format!("{at}: length {len} out of bounds"));
            }
        }
        if let Some(map) = v.as_object() {
            let props = obj.get("properties").and_then(Value::as_object);
            for r in obj
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let r = r.as_str().unwrap_or_default();
                if !map.contains_key(r) {
                    errors.push(format!("{at}: missing `{r}`"));
                }
            }
            for (k, val) in map {
                match props.and_then(|p| p.get(k)) {
                    Some(s) => self.validate(s, val, &format!("{at}.{k}"), errors),
                    None if obj.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        errors.push(format!("{at}: unexpected `{k}`"))
                    }
                    None => {}
                }
            }
        }
        if let Some(arr) = v.as_array() {
            let n = arr.len() as u64;
            if obj
                .get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
                || obj
                    .get("maxItems")
                    .and_then(Value::as_u64)
                    .is_some_and(|m| n > m)
            {
                errors.push(format!("{at}: {n} items out of bounds"));
            }
        }
        if let (Some(items), Some(arr)) = (obj.get("items"), v.as_array()) {
            for (i, item) in arr.iter().enumerate() {
                self.validate(items, item, &format!("{at}[{i}]"), errors);
            }
        }
    }
}
