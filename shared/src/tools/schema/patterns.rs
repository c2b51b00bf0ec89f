//! `pattern` and `patternProperties`: regular expressions, compiled once with the schema.

use regex_lite::Regex;

use super::compile::{Compiler, place};

impl Compiler {
    pub(super) fn regex(&mut self, pattern: &str, at: &str) -> Result<(), String> {
        if !self.regexes.contains_key(pattern) {
            let re = Regex::new(pattern).map_err(|e| {
                let why = e.to_string();
                let why = why.lines().last().unwrap_or("").trim();
                format!(
                    "{}: the pattern \"{pattern}\" is not supported: {why}",
                    place(at)
                )
            })?;
            self.regexes.insert(pattern.to_owned(), re);
        }
        Ok(())
    }
}
