//! The questions of an elicitation form, asked on the terminal and read from stdin, each
//! answer typed by the field's schema.

use std::collections::HashSet;
use std::io::{BufRead, Read, Write};

use mcp_tasks_core::protocol::method;
use serde_json::{Map, Value, json};

use super::ui::Ui;
use super::{Fatal, MAX_INPUT_LINE};

impl Ui {
    /// Asks one input request on the terminal; returns the answer to send.
    pub(super) async fn answer(&mut self, request: &Value) -> Result<Value, Fatal> {
        let method = request["method"].as_str().unwrap_or("");
        let params = &request["params"];
        let mode = params["mode"].as_str().unwrap_or("form");
        if method != method::ELICITATION_CREATE || mode != "form" {
            let kind = if method == method::ELICITATION_CREATE {
                format!("{method} in {mode} mode")
            } else {
                method.to_owned()
            };
            return Err(Fatal::new(format!(
                "the server asked for {kind:?}, which this client did not declare and cannot answer"
            )));
        }
        self.clear();
        eprintln!(
            "? {}",
            self.clean(params["message"].as_str().unwrap_or("(no message)"))
        );
        eprintln!("  (Enter leaves an optional field empty; !decline or !cancel refuses)");
        let schema = &params["requestedSchema"];
        let required: HashSet<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut content = Map::new();
        let empty = Map::new();
        let props = schema["properties"].as_object().unwrap_or(&empty);
        if props.is_empty() {
            return confirm().await;
        }
        for (name, field) in props {
            let required = required.contains(name.as_str());
            let label = self.clean(&field_label(name, field, required));
            loop {
                eprint!("  {label}: ");
                let _ = std::io::stderr().flush();
                let Some(line) = read_line().await? else {
                    eprintln!();
                    return Ok(json!({"action": "cancel"}));
                };
                let text = line.trim();
                if !self.stdin_tty {
                    eprintln!();
                }
                match text {
                    "!decline" => return Ok(json!({"action": "decline"})),
                    "!cancel" => return Ok(json!({"action": "cancel"})),
                    _ => {}
                }
                match field_value(field, text, required) {
                    Ok(Some(v)) => {
                        content.insert(name.clone(), v);
                        break;
                    }
                    Ok(None) => break,
                    Err(why) => eprintln!("  {}", self.clean(&why)),
                }
            }
        }
        Ok(json!({"action": "accept", "content": content}))
    }
}

/// A form with no fields is a yes/no question: `y`/`yes` accepts (with empty content), `n`/`no`
/// or `!decline` declines, `!cancel` and the end of input cancel; anything else asks again.
async fn confirm() -> Result<Value, Fatal> {
    loop {
        eprint!("  [y/n]: ");
        let _ = std::io::stderr().flush();
        let Some(line) = read_line().await? else {
            eprintln!();
            return Ok(json!({"action": "cancel"}));
        };
        match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => return Ok(json!({"action": "accept", "content": {}})),
            "n" | "no" | "!decline" => return Ok(json!({"action": "decline"})),
            "!cancel" => return Ok(json!({"action": "cancel"})),
            _ => eprintln!("  answer y or n (!cancel cancels)"),
        }
    }
}

/// One line from stdin (`None` at its end), at most [`MAX_INPUT_LINE`] bytes.
pub(super) async fn read_line() -> Result<Option<String>, Fatal> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let n = std::io::stdin()
            .lock()
            .take(MAX_INPUT_LINE)
            .read_line(&mut line)?;
        Ok::<_, std::io::Error>((n > 0).then_some(line))
    })
    .await
    .map_err(|e| Fatal::new(format!("reading stdin: {e}")))?
    .map_err(|e| Fatal::new(format!("reading stdin: {e}")))
}

/// The choices of an enum field: (value, label).
pub(super) fn choices(field: &Value) -> Vec<(Value, String)> {
    if let Some(values) = field["enum"].as_array() {
        let names = field["enumNames"].as_array();
        return values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let label = names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| plain(v));
                (v.clone(), label)
            })
            .collect();
    }
    field["oneOf"]
        .as_array()
        .or_else(|| field["anyOf"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|o| {
            let v = o.get("const")?.clone();
            let label = o["title"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| plain(&v));
            Some((v, label))
        })
        .collect()
}

/// A JSON scalar as a person would type it.
pub(super) fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How a field is asked: its title, description, kind and default.
pub(super) fn field_label(name: &str, field: &Value, required: bool) -> String {
    let mut l = field["title"].as_str().unwrap_or(name).to_owned();
    if let Some(d) = field["description"].as_str() {
        l.push_str(&format!(" — {d}"));
    }
    let opts = choices(field);
    if !opts.is_empty() {
        let list: Vec<String> = opts
            .iter()
            .enumerate()
            .map(|(i, (_, label))| format!("{}) {label}", i + 1))
            .collect();
        l.push_str(&format!(" [{}]", list.join(", ")));
    } else {
        match field["type"].as_str() {
            Some("boolean") => l.push_str(" [y/n]"),
            Some(t @ ("number" | "integer")) => l.push_str(&format!(" ({t})")),
            _ => {}
        }
    }
    if let Some(d) = field.get("default") {
        l.push_str(&format!(" (default {})", plain(d)));
    } else if !required {
        l.push_str(" (optional)");
    }
    l
}

/// Reads a typed answer for one field: `Ok(None)` leaves an optional field out, `Err` says
/// why the answer does not fit (the field is asked again).
pub(super) fn field_value(
    field: &Value,
    text: &str,
    required: bool,
) -> Result<Option<Value>, String> {
    if text.is_empty() {
        return match field.get("default") {
            Some(d) => Ok(Some(d.clone())),
            None if required => Err("an answer is required".into()),
            None => Ok(None),
        };
    }
    let opts = choices(field);
    if !opts.is_empty() {
        let by_number = text
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| opts.get(i));
        return by_number
            .or_else(|| {
                opts.iter()
                    .find(|(v, label)| plain(v) == text || label == text)
            })
            .map(|(v, _)| Some(v.clone()))
            .ok_or_else(|| "choose one of the listed values (or its number)".into());
    }
    let bound = |k: &str| field[k].as_f64();
    let in_range =
        |n: f64| bound("minimum").is_none_or(|m| n >= m) && bound("maximum").is_none_or(|m| n <= m);
    match field["type"].as_str() {
        Some("boolean") => match text.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(Some(json!(true))),
            "n" | "no" | "false" => Ok(Some(json!(false))),
            _ => Err("answer y or n".into()),
        },
        Some("integer") => match text.parse::<i64>() {
            Ok(n) if in_range(n as f64) => Ok(Some(json!(n))),
            Ok(_) => Err("out of range".into()),
            Err(_) => Err("an integer, please".into()),
        },
        Some("number") => match text.parse::<f64>().ok().filter(|n| n.is_finite()) {
            Some(n) if in_range(n) => Ok(Some(json!(n))),
            Some(_) => Err("out of range".into()),
            None => Err("a number, please".into()),
        },
        _ => {
            let len = text.chars().count() as u64;
            if field["minLength"].as_u64().is_some_and(|m| len < m) {
                return Err(format!("at least {} characters", field["minLength"]));
            }
            if field["maxLength"].as_u64().is_some_and(|m| len > m) {
                return Err(format!("at most {} characters", field["maxLength"]));
            }
            Ok(Some(json!(text)))
        }
    }
}
