//! Completion as kubectl asks plugins for it: kubectl runs `kubectl_complete-bundle ARGS WORD`
//! (found on the PATH) when completing `kubectl bundle ARGS WORD`, and reads one candidate per
//! line (`candidate<TAB>description`) followed by cobra's directive line (`:4`, no file
//! completion). `kubectl_complete-bundle` runs `kubectl-bundle __complete ARGS WORD`.

use clap::{Arg, Command};

/// cobra's `ShellCompDirectiveDefault`: the shell may complete file names.
const FILES: u8 = 0;
/// cobra's `ShellCompDirectiveNoFileComp`.
const NO_FILES: u8 = 4;

/// The candidates for the last of `words` (the word being completed, possibly empty), given
/// the words before it; and cobra's directive.
pub fn complete(root: &Command, words: &[String]) -> (Vec<String>, u8) {
    let (word, before) = match words.split_last() {
        Some((word, before)) => (word.as_str(), before),
        None => ("", &[][..]),
    };
    let mut command = root;
    let mut value_of: Option<&Arg> = None;
    for w in before {
        if value_of.take().is_some() {
            continue;
        }
        if let Some(flag) = w.strip_prefix("--") {
            if !flag.contains('=') {
                value_of = find_long(command, flag).filter(|a| takes_value(a));
            }
        } else if let Some(short) = w.strip_prefix('-') {
            if short.len() == 1 {
                let c = short.chars().next().unwrap_or_default();
                value_of = command
                    .get_arguments()
                    .find(|a| a.get_short() == Some(c))
                    .filter(|a| takes_value(a));
            }
        } else if let Some(sub) = command.find_subcommand(w) {
            command = sub;
        }
    }
    if let Some(arg) = value_of {
        return values(arg, word);
    }
    if word.starts_with('-') {
        let mut flags: Vec<String> = command
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| {
                let long = format!("--{}", a.get_long()?);
                long.starts_with(word)
                    .then(|| with_help(&long, a.get_help().map(ToString::to_string)))
            })
            .collect();
        flags.sort();
        return (flags, NO_FILES);
    }
    let subcommands: Vec<String> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name().starts_with(word))
        .map(|s| with_help(s.get_name(), s.get_about().map(ToString::to_string)))
        .collect();
    if !subcommands.is_empty() || command.has_subcommands() {
        return (subcommands, NO_FILES);
    }
    // A positional value: one of a fixed set (`completion SHELL`), else anything (files).
    let known: Vec<String> = command
        .get_positionals()
        .flat_map(|a| a.get_possible_values())
        .filter(|v| !v.is_hide_set() && v.get_name().starts_with(word))
        .map(|v| v.get_name().to_string())
        .collect();
    if known.is_empty() {
        (Vec::new(), FILES)
    } else {
        (known, NO_FILES)
    }
}

fn find_long<'a>(command: &'a Command, flag: &str) -> Option<&'a Arg> {
    command.get_arguments().find(|a| a.get_long() == Some(flag))
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|n| n.takes_values())
}

/// The possible values of `arg` starting with `word` (`-o`, `completion SHELL`), else files.
fn values(arg: &Arg, word: &str) -> (Vec<String>, u8) {
    let known: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set() && v.get_name().starts_with(word))
        .map(|v| v.get_name().to_string())
        .collect();
    if known.is_empty() {
        (Vec::new(), FILES)
    } else {
        (known, NO_FILES)
    }
}

/// `candidate<TAB>first line of help`, as cobra shows descriptions.
fn with_help(candidate: &str, help: Option<String>) -> String {
    match help.as_deref().and_then(|h| h.lines().next()) {
        Some(line) if !line.is_empty() => format!("{candidate}\t{line}"),
        _ => candidate.to_string(),
    }
}

/// Prints the candidates and the directive as kubectl reads them.
pub fn print(root: &Command, words: &[String]) {
    let (candidates, directive) = complete(root, words);
    for candidate in candidates {
        println!("{candidate}");
    }
    println!(":{directive}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn words(text: &str) -> Vec<String> {
        let mut words: Vec<String> = text.split(' ').map(String::from).collect();
        if text.is_empty() {
            words = vec![String::new()];
        }
        words
    }

    fn names(text: &str) -> Vec<String> {
        let mut root = super::super::Cli::command();
        root.build();
        complete(&root, &words(text))
            .0
            .into_iter()
            .map(|c| c.split('\t').next().unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn verbs_flags_and_values_complete() {
        assert_eq!(names("ap"), ["approve"]);
        assert!(names("").contains(&"rollback".to_string()));
        assert!(!names("").iter().any(|n| n.starts_with("__")), "hidden");
        assert!(names("approve my-app --wa").contains(&"--wait".to_string()));
        assert!(
            names("--kubeconfig /tmp/kc status my-app --cont").contains(&"--context".to_string())
        );
        assert_eq!(names("completion f"), ["fish"]);
    }
}
