//! Label selectors as the API server reads the `labelSelector` query
//! parameter (k8s.io/apimachinery `labels.Parse`): equality (`k=v`, `k==v`,
//! `k!=v`), set-based (`k in (a,b)`, `k notin (a,b)`), existence (`k`, `!k`)
//! and the integer comparisons `k>1`, `k<1`; requirements joined by commas
//! are all required. Whitespace separates tokens and is otherwise ignored.
//! Keys must be qualified names and values label values, as the API server
//! checks them; anything else is an error the server answers with 400 Bad
//! Request, so clients meet the same refusals here as in a cluster.
//!
//! Written from the documented grammar and behaviour; the tests below are
//! the cases the API server's documentation and parser define.

use serde_json::Value;

#[derive(Debug, Default)]
pub struct Selector(Vec<Requirement>);

#[derive(Debug)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Equals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// Why a selector was refused: the text of the 400's message.
#[derive(Debug, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl std::fmt::Display for SelectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Selector {
    /// Parses `text` as the API server does; an empty text selects all.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        Parser::new(text)
            .selector()
            .map(Self)
            .map_err(SelectorError)
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0
            .iter()
            .all(|r| r.matches(labels[r.key.as_str()].as_str()))
    }
}

impl Requirement {
    fn matches(&self, label: Option<&str>) -> bool {
        let listed = |v: &str| self.values.iter().any(|w| w == v);
        match (self.op, label) {
            (Op::In | Op::Equals, Some(v)) => listed(v),
            (Op::In | Op::Equals, None) => false,
            (Op::NotIn | Op::NotEquals, Some(v)) => !listed(v),
            (Op::NotIn | Op::NotEquals, None) => true,
            (Op::Exists, found) => found.is_some(),
            (Op::DoesNotExist, found) => found.is_none(),
            (Op::GreaterThan | Op::LessThan, None) => false,
            (Op::GreaterThan | Op::LessThan, Some(v)) => {
                // A label that is not an integer never compares.
                let (Ok(have), Some(Ok(bound))) = (
                    v.parse::<i64>(),
                    self.values.first().map(|b| b.parse::<i64>()),
                ) else {
                    return false;
                };
                if self.op == Op::GreaterThan {
                    have > bound
                } else {
                    have < bound
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    End,
    Identifier,
    OpenPar,
    ClosePar,
    Comma,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    In,
    NotIn,
}

/// The fixed spellings; `in` and `notin` are words, the rest symbols.
fn keyword(text: &str) -> Option<Token> {
    Some(match text {
        "(" => Token::OpenPar,
        ")" => Token::ClosePar,
        "," => Token::Comma,
        "!" => Token::Not,
        "=" => Token::Equals,
        "==" => Token::DoubleEquals,
        "!=" => Token::NotEquals,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        "in" => Token::In,
        "notin" => Token::NotIn,
        _ => return None,
    })
}

fn is_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Splits the text into tokens: runs of symbols are cut at the longest
/// spelling they start with (`!=` is one token, `=!` two), and anything else
/// up to a symbol or whitespace is a word (a keyword or an identifier). A NUL
/// byte ends the text, as in the API server's lexer.
fn tokens(text: &str) -> Vec<(Token, String)> {
    let bytes = text.as_bytes();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < end && is_space(bytes[i]) {
            i += 1;
        }
        if i == end {
            out.push((Token::End, String::new()));
            return out;
        }
        let start = i;
        if is_symbol(bytes[i]) {
            let mut best = (keyword(&text[i..=i]).unwrap_or(Token::End), i + 1);
            let mut j = i + 1;
            while j < end && is_symbol(bytes[j]) {
                match keyword(&text[start..=j]) {
                    Some(token) => best = (token, j + 1),
                    None => break,
                }
                j += 1;
            }
            i = best.1;
            out.push((best.0, text[start..i].to_owned()));
        } else {
            while i < end && !is_symbol(bytes[i]) && !is_space(bytes[i]) {
                i += 1;
            }
            let word = &text[start..i];
            let token = keyword(word).unwrap_or(Token::Identifier);
            out.push((token, word.to_owned()));
        }
    }
}

/// Where a token is read: `in`/`notin` are operators only right after a
/// key, and plain words (keys or values) everywhere else.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Operator,
    Value,
}

struct Parser {
    tokens: Vec<(Token, String)>,
    at: usize,
}

impl Parser {
    fn new(text: &str) -> Self {
        Self {
            tokens: tokens(text),
            at: 0,
        }
    }

    fn peek(&self, context: Context) -> (Token, &str) {
        let (token, text) = &self.tokens[self.at.min(self.tokens.len() - 1)];
        (as_read(*token, context), text)
    }

    fn next(&mut self, context: Context) -> (Token, String) {
        let (token, text) = self.tokens[self.at.min(self.tokens.len() - 1)].clone();
        self.at += 1;
        (as_read(token, context), text)
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            match self.peek(Context::Value) {
                (Token::Identifier | Token::Not, _) => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    match self.next(Context::Value) {
                        (Token::End, _) => return Ok(requirements),
                        (Token::Comma, _) => match self.peek(Context::Value) {
                            (Token::Identifier | Token::Not, _) => {}
                            (_, found) => {
                                return Err(format!(
                                    "found '{found}', expected: identifier after ','"
                                ));
                            }
                        },
                        (_, found) => {
                            return Err(format!(
                                "found '{found}', expected: ',' or 'end of string'"
                            ));
                        }
                    }
                }
                (Token::End, _) => return Ok(requirements),
                (_, found) => {
                    return Err(format!(
                        "found '{found}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (mut token, mut key) = self.next(Context::Value);
        let negated = token == Token::Not;
        if negated {
            (token, key) = self.next(Context::Value);
        }
        if token != Token::Identifier {
            return Err(format!("found '{key}', expected: identifier"));
        }
        check_key(&key)?;
        let alone = matches!(self.peek(Context::Value).0, Token::End | Token::Comma);
        if negated || alone {
            // `!key` followed by more is left for the caller to refuse.
            let op = if negated {
                Op::DoesNotExist
            } else {
                Op::Exists
            };
            return Ok(Requirement {
                key,
                op,
                values: Vec::new(),
            });
        }
        let op = match self.next(Context::Operator) {
            (Token::In, _) => Op::In,
            (Token::NotIn, _) => Op::NotIn,
            (Token::Equals | Token::DoubleEquals, _) => Op::Equals,
            (Token::NotEquals, _) => Op::NotEquals,
            (Token::GreaterThan, _) => Op::GreaterThan,
            (Token::LessThan, _) => Op::LessThan,
            (_, found) => {
                return Err(format!(
                    "found '{found}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        };
        let values = match op {
            Op::In | Op::NotIn => self.value_set()?,
            _ => vec![self.exact_value()?],
        };
        check_values(&key, op, &values)?;
        Ok(Requirement { key, op, values })
    }

    /// `(a,b)`; empty members are the empty value: `()`, `(,a)`, `(a,,b)`.
    fn value_set(&mut self) -> Result<Vec<String>, String> {
        let (token, found) = self.next(Context::Value);
        if token != Token::OpenPar {
            return Err(format!("found '{found}' expected: '('"));
        }
        let mut values: Vec<String> = Vec::new();
        let add = |values: &mut Vec<String>, v: &str| {
            if !values.iter().any(|w| w == v) {
                values.push(v.to_owned());
            }
        };
        match self.peek(Context::Value) {
            (Token::ClosePar, _) => {
                self.next(Context::Value);
                return Ok(vec![String::new()]);
            }
            (Token::Identifier | Token::Comma, _) => {}
            (_, found) => {
                return Err(format!("found '{found}', expected: ',', ')' or identifier"));
            }
        }
        loop {
            match self.next(Context::Value) {
                (Token::Identifier, value) => {
                    add(&mut values, &value);
                    match self.peek(Context::Value) {
                        (Token::Comma, _) => {}
                        (Token::ClosePar, _) => break,
                        (_, found) => return Err(format!("found '{found}', expected: ',' or ')'")),
                    }
                }
                (Token::Comma, _) => {
                    if values.is_empty() {
                        add(&mut values, "");
                    }
                    match self.peek(Context::Value).0 {
                        Token::ClosePar => {
                            add(&mut values, "");
                            break;
                        }
                        Token::Comma => {
                            self.next(Context::Value);
                            add(&mut values, "");
                        }
                        _ => {}
                    }
                }
                (_, found) => return Err(format!("found '{found}', expected: ',', or identifier")),
            }
        }
        // The closing parenthesis the loop stopped at.
        self.next(Context::Value);
        Ok(values)
    }

    /// The one value after `=`, `==`, `!=`, `>` or `<`; nothing (end or a
    /// comma next) is the empty value.
    fn exact_value(&mut self) -> Result<String, String> {
        if matches!(self.peek(Context::Value).0, Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.next(Context::Value) {
            (Token::Identifier, value) => Ok(value),
            (_, found) => Err(format!("found '{found}', expected: identifier")),
        }
    }
}

fn as_read(token: Token, context: Context) -> Token {
    match token {
        Token::In | Token::NotIn if context == Context::Value => Token::Identifier,
        other => other,
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, the shape of a label key's
/// name part and of a non-empty label value.
fn is_label_word(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9-]`,
/// each starting and ending alphanumeric, 253 characters at most.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            b.first().is_some_and(edge)
                && b.last().is_some_and(edge)
                && b.iter().all(|c| edge(c) || *c == b'-')
        })
}

/// A label key: `[prefix/]name`, the prefix a DNS subdomain, the name at
/// most 63 characters.
fn check_key(key: &str) -> Result<(), String> {
    let invalid = |why: &str| Err(format!("key: Invalid value: \"{key}\": {why}"));
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                return invalid("prefix part must be non-empty");
            }
            if !is_dns_subdomain(prefix) {
                return invalid(
                    "prefix part must be a lowercase RFC 1123 subdomain (e.g. 'example.com')",
                );
            }
            name
        }
        _ => {
            return invalid(
                "a label key is a name with an optional DNS subdomain prefix and one '/' (e.g. 'example.com/MyName')",
            );
        }
    };
    if name.is_empty() {
        return invalid("name part must be non-empty");
    }
    if name.len() > 63 {
        return invalid("name part must be no more than 63 characters");
    }
    if !is_label_word(name) {
        return invalid(
            "name part must be alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character",
        );
    }
    Ok(())
}

/// The value checks the API server makes once a requirement is read.
fn check_values(key: &str, op: Op, values: &[String]) -> Result<(), String> {
    if matches!(op, Op::GreaterThan | Op::LessThan) {
        for (i, v) in values.iter().enumerate() {
            if v.parse::<i64>().is_err() {
                return Err(format!(
                    "values[{i}]: Invalid value: \"{v}\": for 'Gt', 'Lt' operators, the value must be an integer"
                ));
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        if v.len() > 63 {
            return Err(format!(
                "values[{i}][{key}]: Invalid value: \"{v}\": must be no more than 63 characters"
            ));
        }
        if !v.is_empty() && !is_label_word(v) {
            return Err(format!(
                "values[{i}][{key}]: Invalid value: \"{v}\": a valid label must be an empty string or alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    /// Which of these label sets `selector` selects.
    fn selects(selector: &str, sets: &[Value]) -> Vec<bool> {
        let s = Selector::parse(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
        sets.iter().map(|l| s.matches(&object(l.clone()))).collect()
    }

    #[test]
    fn equality_requirements_need_the_label_and_inequality_accepts_its_absence() {
        let sets = [json!({"env": "prod"}), json!({"env": "dev"}), json!({})];
        assert_eq!(selects("env=prod", &sets), [true, false, false]);
        assert_eq!(selects("env==prod", &sets), [true, false, false]);
        assert_eq!(selects("env!=prod", &sets), [false, true, true]);
        assert_eq!(selects("env=", &sets), [false, false, false]);
        assert_eq!(selects("env=", &[json!({"env": ""})]), [true]);
    }

    #[test]
    fn set_requirements_follow_in_and_notin() {
        let sets = [
            json!({"tier": "a"}),
            json!({"tier": "b"}),
            json!({"tier": "c"}),
            json!({}),
        ];
        assert_eq!(selects("tier in (a,b)", &sets), [true, true, false, false]);
        assert_eq!(
            selects("tier notin (a,b)", &sets),
            [false, false, true, true]
        );
        // Empty members are the empty value.
        assert_eq!(
            selects("tier in ()", &[json!({"tier": ""}), json!({})]),
            [true, false]
        );
        assert_eq!(
            selects(
                "tier in (a,,b)",
                &[json!({"tier": ""}), json!({"tier": "b"})]
            ),
            [true, true]
        );
        assert_eq!(selects("tier in (,a)", &[json!({"tier": ""})]), [true]);
        assert_eq!(selects("tier in (a,)", &[json!({"tier": ""})]), [true]);
    }

    #[test]
    fn existence_requirements_look_only_at_the_key() {
        let sets = [
            json!({"skip": ""}),
            json!({"skip": "yes"}),
            json!({"other": "x"}),
        ];
        assert_eq!(selects("skip", &sets), [true, true, false]);
        assert_eq!(selects("!skip", &sets), [false, false, true]);
    }

    #[test]
    fn integer_comparisons_need_an_integer_label() {
        let sets = [
            json!({"n": "5"}),
            json!({"n": "-1"}),
            json!({"n": "x"}),
            json!({}),
        ];
        assert_eq!(selects("n>1", &sets), [true, false, false, false]);
        assert_eq!(selects("n<1", &sets), [false, true, false, false]);
    }

    #[test]
    fn requirements_joined_by_commas_must_all_hold() {
        let sets = [
            json!({"app": "ssh", "tier": "a"}),
            json!({"app": "ssh", "tier": "a", "skip": "1"}),
            json!({"app": "web", "tier": "a"}),
        ];
        assert_eq!(
            selects("app=ssh,tier in (a,b),!skip", &sets),
            [true, false, false]
        );
        assert_eq!(selects("", &sets), [true, true, true], "empty selects all");
    }

    #[test]
    fn whitespace_separates_tokens_and_is_otherwise_ignored() {
        let sets = [json!({"a": "x", "b": "y"}), json!({"a": "x"})];
        for text in [
            "a=x,b in (y,z)",
            "  a = x ,\tb in ( y , z )  ",
            "a==x, b  in(y,z)",
            "\na\r=\nx,b\tin\t(y,z)",
        ] {
            assert_eq!(selects(text, &sets), [true, false], "{text:?}");
        }
    }

    #[test]
    fn in_and_notin_are_plain_words_as_keys_and_values() {
        let sets = [json!({"in": "notin"}), json!({"in": "x"})];
        assert_eq!(selects("in=notin", &sets), [true, false]);
        assert_eq!(selects("in in (notin)", &sets), [true, false]);
        assert_eq!(
            selects("notin", &[json!({"notin": "1"}), json!({})]),
            [true, false]
        );
    }

    #[test]
    fn prefixed_keys_as_kubernetes_writes_them_are_accepted() {
        let sets = [json!({"service.kubernetes.io/service-proxy-name": "ssh-fwd"})];
        assert_eq!(
            selects("service.kubernetes.io/service-proxy-name=ssh-fwd", &sets),
            [true]
        );
        assert_eq!(selects("!service.kubernetes.io/headless", &sets), [true]);
    }

    #[test]
    fn malformed_selectors_are_refused_with_the_servers_reason() {
        let refused = |text: &str| match Selector::parse(text) {
            Ok(s) => panic!("{text:?} was accepted as {s:?}"),
            Err(e) => e.0,
        };
        // Structure.
        assert!(refused("a=b,").contains("expected: identifier after ','"));
        assert!(refused(",a").contains("found ',', expected: !, identifier"));
        assert!(refused("a b").contains("found 'b', expected: in, notin"));
        assert!(refused("a in b").contains("expected: '('"));
        assert!(refused("a in (b").contains("expected: ',' or ')'"));
        assert!(refused("a in (b c)").contains("found 'c'"));
        assert!(refused("!a=b").contains("found '=', expected: ',' or 'end of string'"));
        assert!(refused("a=(b)").contains("found '(', expected: identifier"));
        assert!(refused("a=b=c").contains("found '='"));
        assert!(refused("a=!b").contains("found '!', expected: identifier"));
        assert!(refused("!").contains("expected: identifier"));
        assert!(refused("a in (=)").contains("expected: ',', ')' or identifier"));
        // Keys.
        assert!(refused("a+b=c").contains("name part"));
        assert!(refused("/a").contains("prefix part must be non-empty"));
        assert!(refused("Example.com/a").contains("prefix part"));
        assert!(refused("a/b/c").contains("one '/'"));
        assert!(refused("-a").contains("name part"));
        assert!(refused(&"k".repeat(64)).contains("no more than 63"));
        // Values.
        assert!(refused("a=b+c").contains("values[0][a]"));
        assert!(refused("a in (ok,-bad)").contains("\"-bad\""));
        assert!(refused(&format!("a={}", "v".repeat(64))).contains("no more than 63"));
        assert!(refused("n>x").contains("must be an integer"));
        assert!(refused("n>").contains("must be an integer"));
    }

    #[test]
    fn every_refusal_names_the_requirement_or_the_token() {
        for text in ["a=b=c", "a b", "a+b=c", "a=b+c", "a in b"] {
            let e = Selector::parse(text).unwrap_err().0;
            assert!(
                e.starts_with("unable to parse requirement: ") || e.starts_with("found "),
                "{text:?}: {e}"
            );
        }
    }
}
