//! CEL for the fake's admission policies, with the `cel` crate (cel-rust)
//! standing in for kube-apiserver's cel-go. cel-rust parses and evaluates
//! but does not type-check, so loading checks what it can: the expression
//! parses, names only the variables Kubernetes gives a policy, and calls
//! only functions both Kubernetes' CEL and cel-rust have. What is left to
//! the real server: its type checker, its cost budget, and the extension
//! libraries (strings, lists, regex, quantity, ...), which loading refuses.

use std::{collections::BTreeSet, sync::Arc};

use cel::{
    Context, Env, Program, Value,
    common::ast::{EntryExpr, Expr, IdedExpr},
};
use serde_json::Value as Json;

/// The variables a ValidatingAdmissionPolicy's expressions may name
/// (`authorizer` is Kubernetes' too, but the fake has none to give).
const VARIABLES: [&str; 6] = [
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
];

/// Functions (by name; operators aside) of the standard CEL library that
/// Kubernetes' CEL environment has and cel-rust evaluates.
const FUNCTIONS: [&str; 12] = [
    "size",
    "startsWith",
    "endsWith",
    "contains",
    "matches",
    "string",
    "int",
    "uint",
    "double",
    "bool",
    "type",
    "dyn",
];

/// A compiled expression, with its text for messages.
#[derive(Clone)]
pub struct Expression {
    pub text: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The environment every expression is compiled and run in.
fn env() -> Arc<Env> {
    static ENV: std::sync::OnceLock<Arc<Env>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib())).clone()
}

impl Expression {
    /// Compiles `text`; refuses it, naming the problem, when it does not
    /// parse or names what the fake cannot stand in for.
    pub fn compile(text: &str) -> Result<Self, String> {
        let program = env()
            .compile(text)
            .map_err(|e| format!("compilation failed: {e}"))?;
        let mut free = BTreeSet::new();
        let mut calls = BTreeSet::new();
        walk(program.expression(), &mut Vec::new(), &mut free, &mut calls);
        if let Some(unknown) = free.iter().find(|v| !VARIABLES.contains(&v.as_str())) {
            return Err(format!(
                "compilation failed: undeclared reference to '{unknown}' (a policy has {})",
                VARIABLES.join(", ")
            ));
        }
        let operator = |f: &str| f.starts_with(['_', '@', '!']);
        if let Some(unknown) = calls
            .iter()
            .find(|f| !operator(f) && !FUNCTIONS.contains(&f.as_str()))
        {
            return Err(format!(
                "compilation failed: function '{unknown}' is not one the fake evaluates like the API server (it knows {}); use those, or teach tests/src/fake_api/admission/cel.rs",
                FUNCTIONS.join(", ")
            ));
        }
        Ok(Self {
            text: text.to_owned(),
            program: Arc::new(program),
        })
    }

    /// Evaluates with `bindings` (name, JSON value); the error as the API
    /// server words an evaluation error.
    pub fn eval(&self, bindings: &[(&str, &Value)]) -> Result<Value, String> {
        let mut context = Context::with_env(env());
        for (name, value) in bindings {
            context.add_variable_from_value(*name, (*value).clone());
        }
        self.program
            .execute(&context)
            .map_err(|e| format!("expression '{}' resulted in error: {e}", self.text.trim()))
    }

    /// Evaluates to a bool, as validations and match conditions must.
    pub fn eval_bool(&self, bindings: &[(&str, &Value)]) -> Result<bool, String> {
        match self.eval(bindings)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "expression '{}' resulted in error: a bool was expected, got {:?}",
                self.text.trim(),
                other.type_of()
            )),
        }
    }
}

/// Collects the free identifiers and the called functions of `expr`; the
/// variables of the comprehensions it is inside are in `bound`.
fn walk(
    expr: &IdedExpr,
    bound: &mut Vec<String>,
    free: &mut BTreeSet<String>,
    calls: &mut BTreeSet<String>,
) {
    match &expr.expr {
        Expr::Ident(name) if !bound.contains(name) && !name.starts_with('@') => {
            free.insert(name.clone());
        }
        Expr::Call(call) => {
            calls.insert(call.func_name.clone());
            call.target.iter().for_each(|t| walk(t, bound, free, calls));
            call.args.iter().for_each(|a| walk(a, bound, free, calls));
        }
        Expr::Select(select) => walk(&select.operand, bound, free, calls),
        Expr::List(list) => list
            .elements
            .iter()
            .for_each(|e| walk(e, bound, free, calls)),
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::StructField(f) => walk(&f.value, bound, free, calls),
                    EntryExpr::MapEntry(m) => {
                        walk(&m.key, bound, free, calls);
                        walk(&m.value, bound, free, calls);
                    }
                }
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, bound, free, calls);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for part in [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                walk(part, bound, free, calls);
            }
            bound.truncate(depth);
        }
        Expr::Struct(_) => {
            calls.insert("message construction".to_owned());
        }
        _ => {}
    }
}

/// A JSON value as CEL sees an object converted to unstructured: numbers
/// that are whole are `int` (as Kubernetes' int32/int64 fields are),
/// others `double`.
pub fn value(json: &Json) -> Value {
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(items) => Value::from(items.iter().map(value).collect::<Vec<_>>()),
        Json::Object(fields) => Value::from(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), value(v)))
                .collect::<std::collections::HashMap<String, Value>>(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_expression_that_does_not_parse_or_names_the_unknown_is_refused() {
        assert!(Expression::compile("object.metadata.name ==").is_err());
        let undeclared = Expression::compile("objct.metadata.name == 'x'").unwrap_err();
        assert!(undeclared.contains("'objct'"), "{undeclared}");
        let extension = Expression::compile("request.name.lowerAscii() == 'x'").unwrap_err();
        assert!(extension.contains("lowerAscii"), "{extension}");
        let fine = "object.spec.ports.all(p, p.port > 0) && has(object.metadata.labels) && 'a' in object.metadata.labels";
        assert!(Expression::compile(fine).is_ok());
    }

    #[test]
    fn evaluation_sees_json_with_int_numbers_and_absent_fields_as_errors() {
        let object = value(&json!({"spec": {"ports": [{"port": 22}]}, "metadata": {}}));
        let e = Expression::compile("object.spec.ports[0].port == 22").unwrap();
        assert_eq!(e.eval_bool(&[("object", &object)]), Ok(true));
        let e = Expression::compile("!has(object.metadata.labels)").unwrap();
        assert_eq!(e.eval_bool(&[("object", &object)]), Ok(true));
        let e = Expression::compile("object.metadata.labels['a'] == 'b'").unwrap();
        let error = e.eval_bool(&[("object", &object)]).unwrap_err();
        assert!(
            error.starts_with("expression 'object.metadata.labels['a'] == 'b'' resulted in error"),
            "{error}"
        );
        // Guarded: the right side of || is not evaluated.
        let e = Expression::compile("true || object.nothing.here").unwrap();
        assert_eq!(e.eval_bool(&[("object", &object)]), Ok(true));
        let e = Expression::compile("false ? object.nothing.here : true").unwrap();
        assert_eq!(e.eval_bool(&[("object", &object)]), Ok(true));
    }
}
