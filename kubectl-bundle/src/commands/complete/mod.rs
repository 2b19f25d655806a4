//! Completion as kubectl asks plugins for it: kubectl runs `kubectl_complete-bundle ARGS WORD`
//! (found on the PATH) when completing `kubectl bundle ARGS WORD`, and reads one candidate per
//! line (`candidate<TAB>description`) followed by cobra's directive line (`:4`, no file
//! completion). `kubectl_complete-bundle` runs `kubectl-bundle __complete ARGS WORD`.
//! Where a verb takes a bundle's name, the candidates are the names of the Bundles in the
//! cluster, read with the kubeconfig flags among ARGS as the verb itself would read them;
//! `approve` and `deny` offer only the bundles they can decide on.

mod bundles;

use clap::{Arg, Command};
use gantry_api::Bundle;
use gantry_api::conditions::{reasons, types};
use gantry_rules::conditions::find;

use bundles::{bundle_names, cluster_flags};

/// cobra's `ShellCompDirectiveDefault`: the shell may complete file names.
const FILES: u8 = 0;
/// cobra's `ShellCompDirectiveNoSpace`: no space after the candidate (`jsonpath=`).
const NO_SPACE: u8 = 2;
/// cobra's `ShellCompDirectiveNoFileComp`.
const NO_FILES: u8 = 4;

/// The ids of the positional arguments that take bundle names (`status NAME`,
/// `suspend NAME...`).
const BUNDLE_NAME_ARGS: [&str; 2] = ["name", "names"];

/// What completes the word being typed.
#[derive(Debug, PartialEq)]
pub enum Completion {
    /// These candidates, with cobra's directive.
    Candidates(Vec<String>, u8),
    /// The names of the cluster's Bundles that start with `prefix` and are `offered`, but for
    /// those in `typed` (already on the command line).
    BundleNames {
        prefix: String,
        typed: Vec<String>,
        offered: Offered,
    },
}

/// Which of the cluster's Bundles a verb's names complete to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Offered {
    All,
    /// `approve`'s: the resolved digest awaits a decision, or was denied (approving it after
    /// all is a decision too).
    Approvable,
    /// `deny`'s: the resolved digest awaits a decision, or was approved (denying it keeps what
    /// is installed).
    Deniable,
}

impl Offered {
    fn of(verb: &str) -> Self {
        match verb {
            "approve" => Offered::Approvable,
            "deny" => Offered::Deniable,
            _ => Offered::All,
        }
    }

    /// Whether `bundle` is offered, by what its `Approved` condition says of its resolved
    /// digest (a class that approves automatically leaves nothing to decide).
    fn offers(self, bundle: &Bundle) -> bool {
        let approval = bundle
            .status
            .as_ref()
            .and_then(|s| find(&s.conditions, types::APPROVED))
            .map(|c| c.reason.as_str());
        match self {
            Offered::All => true,
            Offered::Approvable => {
                matches!(approval, Some(reasons::AWAITING_APPROVAL | reasons::DENIED))
            }
            Offered::Deniable => {
                matches!(
                    approval,
                    Some(reasons::AWAITING_APPROVAL | reasons::APPROVED)
                )
            }
        }
    }
}

/// The `-o` formats a verb takes, as its help says (`jsonpath=` and `custom-columns=` are
/// completed up to the `=`).
fn output_formats(verb: &str) -> &'static [&'static str] {
    const ALL: [&str; 6] = [
        "json",
        "yaml",
        "name",
        "wide",
        "jsonpath=",
        "custom-columns=",
    ];
    match verb {
        "list" => &ALL,
        "status" | "events" | "tree" => &["json", "yaml", "name", "jsonpath=", "custom-columns="],
        "history" | "version" => &["json", "yaml", "jsonpath=", "custom-columns="],
        _ => &[],
    }
}

/// The candidates for the last of `words` (the word being completed, possibly empty), given
/// the words before it; and cobra's directive.
pub fn complete(root: &Command, words: &[String]) -> Completion {
    let (word, before) = match words.split_last() {
        Some((word, before)) => (word.as_str(), before),
        None => ("", &[][..]),
    };
    let mut command = root;
    let mut value_of: Option<&Arg> = None;
    // The positional words given to the verb, in order.
    let mut positionals: Vec<&str> = Vec::new();
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
        } else {
            positionals.push(w);
        }
    }
    if let Some(arg) = value_of {
        if arg.get_long() == Some("output") {
            return formats(output_formats(command.get_name()), word);
        }
        let (candidates, directive) = values(arg, word);
        return Completion::Candidates(candidates, directive);
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
        return Completion::Candidates(flags, NO_FILES);
    }
    let subcommands: Vec<String> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name().starts_with(word))
        .map(|s| with_help(s.get_name(), s.get_about().map(ToString::to_string)))
        .collect();
    if !subcommands.is_empty() || command.has_subcommands() {
        return Completion::Candidates(subcommands, NO_FILES);
    }
    // The positional argument the word is a value of: the next one, or the last one when it
    // takes several values.
    let next = command
        .get_positionals()
        .nth(positionals.len())
        .or_else(|| {
            command
                .get_positionals()
                .last()
                .filter(|a| a.get_num_args().is_some_and(|n| n.max_values() > 1))
        });
    let Some(next) = next else {
        return Completion::Candidates(Vec::new(), NO_FILES);
    };
    if BUNDLE_NAME_ARGS.contains(&next.get_id().as_str()) {
        return Completion::BundleNames {
            prefix: word.to_string(),
            typed: positionals.iter().map(ToString::to_string).collect(),
            offered: Offered::of(command.get_name()),
        };
    }
    // A value of a fixed set (`completion SHELL`), else anything (files).
    let (candidates, directive) = values(next, word);
    Completion::Candidates(candidates, directive)
}

/// The formats of `-o` starting with `word`; no space after one that ends with `=`.
fn formats(known: &[&str], word: &str) -> Completion {
    let matching: Vec<String> = known
        .iter()
        .filter(|f| f.starts_with(word))
        .map(ToString::to_string)
        .collect();
    let directive = if !matching.is_empty() && matching.iter().all(|f| f.ends_with('=')) {
        NO_FILES | NO_SPACE
    } else {
        NO_FILES
    };
    Completion::Candidates(matching, directive)
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
pub async fn print(root: &Command, words: &[String]) {
    let before = words.split_last().map_or(&[][..], |(_, before)| before);
    let (candidates, directive) = match complete(root, words) {
        Completion::Candidates(candidates, directive) => (candidates, directive),
        Completion::BundleNames {
            prefix,
            typed,
            offered,
        } => {
            let names = bundle_names(&cluster_flags(before), offered).await;
            let matching = names
                .into_iter()
                .filter(|n| n.starts_with(&prefix) && !typed.contains(n))
                .collect();
            (matching, NO_FILES)
        }
    };
    for candidate in candidates {
        println!("{candidate}");
    }
    println!(":{directive}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::testing::condition;
    use clap::CommandFactory;

    /// The words of `text`, split at spaces: the last one is being completed.
    pub(super) fn words(text: &str) -> Vec<String> {
        let mut words: Vec<String> = text.split(' ').map(String::from).collect();
        if text.is_empty() {
            words = vec![String::new()];
        }
        words
    }

    fn root() -> Command {
        let mut root = super::super::Cli::command();
        root.build();
        root
    }

    fn names(text: &str) -> Vec<String> {
        match complete(&root(), &words(text)) {
            Completion::Candidates(candidates, _) => candidates
                .into_iter()
                .map(|c| c.split('\t').next().unwrap_or_default().to_string())
                .collect(),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn verbs_taking_a_bundle_complete_bundle_names() {
        for verb in [
            "status",
            "events",
            "tree",
            "history",
            "rollback",
            "diff",
            "approve",
            "deny",
            "suspend",
            "resume",
            "reconcile",
        ] {
            let offered = match verb {
                "approve" => Offered::Approvable,
                "deny" => Offered::Deniable,
                _ => Offered::All,
            };
            assert_eq!(
                complete(&root(), &words(&format!("{verb} --context c my"))),
                Completion::BundleNames {
                    prefix: "my".into(),
                    typed: vec![],
                    offered,
                },
                "{verb}"
            );
        }
        // One name taken: nothing more; several taken: the others.
        assert!(names("history my-app ").is_empty());
        assert!(matches!(
            complete(&root(), &words("status my-app ")),
            Completion::BundleNames { typed, .. } if typed == ["my-app"]
        ));
        assert_eq!(
            complete(&root(), &words("suspend app-a ")),
            Completion::BundleNames {
                prefix: String::new(),
                typed: vec!["app-a".into()],
                offered: Offered::All,
            }
        );
        assert!(names("validate ").is_empty(), "a directory: files");
        assert_eq!(
            complete(&root(), &words("validate ")),
            Completion::Candidates(vec![], FILES)
        );
    }

    #[test]
    fn approve_and_deny_offer_the_bundles_they_decide_on() {
        let with_approved = |reason: Option<&str>| {
            let mut bundle = Bundle::new("b", Default::default());
            bundle.status = Some(gantry_api::BundleStatus {
                conditions: reason
                    .map(|reason| {
                        let approved = [reasons::APPROVED, reasons::AUTOMATIC_APPROVAL];
                        let status = if approved.contains(&reason) {
                            "True"
                        } else {
                            "False"
                        };
                        condition(types::APPROVED, status, reason, "", None)
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            });
            bundle
        };
        let offered = |reason: Option<&str>| {
            let bundle = with_approved(reason);
            [Offered::All, Offered::Approvable, Offered::Deniable].map(|o| o.offers(&bundle))
        };
        // [all, approve, deny]
        assert_eq!(
            offered(Some(reasons::AWAITING_APPROVAL)),
            [true, true, true]
        );
        assert_eq!(offered(Some(reasons::DENIED)), [true, true, false]);
        assert_eq!(offered(Some(reasons::APPROVED)), [true, false, true]);
        assert_eq!(
            offered(Some(reasons::AUTOMATIC_APPROVAL)),
            [true, false, false]
        );
        assert_eq!(offered(None), [true, false, false], "not unpacked yet");
    }

    #[test]
    fn output_formats_are_the_verbs_own() {
        assert_eq!(names("list -o w"), ["wide"]);
        assert_eq!(
            names("status my-app -o "),
            ["json", "yaml", "name", "jsonpath=", "custom-columns="]
        );
        assert_eq!(names("history my-app --output j"), ["json", "jsonpath="]);
        assert_eq!(
            complete(&root(), &words("tree x -o jsonp")),
            Completion::Candidates(vec!["jsonpath=".into()], NO_FILES | NO_SPACE)
        );
        // Every verb with -o has its formats, each one its help names.
        for verb in root().get_subcommands() {
            let Some(output) = verb
                .get_arguments()
                .find(|a| a.get_long() == Some("output"))
            else {
                continue;
            };
            let help = output
                .get_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            let formats = output_formats(verb.get_name());
            assert!(!formats.is_empty(), "{}", verb.get_name());
            for format in formats {
                assert!(
                    help.contains(format.trim_end_matches('=')),
                    "{}: {format} not in {help:?}",
                    verb.get_name()
                );
            }
        }
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
