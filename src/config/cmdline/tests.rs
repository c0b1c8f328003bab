//! pflag's rules, case by case.

use super::*;

fn read(args: &[&str]) -> Result<CommandLine, CommandLineError> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    parse(&args, |_| true)
}

/// (flag, value) of each use; a bare flag's value is `None`.
fn uses(args: &[&str]) -> Vec<(&'static str, Option<String>)> {
    let line = read(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    line.uses
        .iter()
        .map(|u| (u.setting.flag, u.value.clone()))
        .collect()
}

#[test]
fn values_attached_or_separate() {
    let s = |v: &str| Some(v.to_owned());
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, Option<String>)>);
    let cases: Vec<Case> = vec![
        (vec!["--max-pods=30"], vec![("max-pods", s("30"))]),
        (vec!["--max-pods", "30"], vec![("max-pods", s("30"))]),
        // pflag takes the next argument as the value, whatever it looks like.
        (
            vec!["--cluster-domain", "--port"],
            vec![("cluster-domain", s("--port"))],
        ),
        (vec!["--node-labels="], vec![("node-labels", s(""))]),
        (vec!["--max_pods=3"], vec![("max-pods", s("3"))]),
        (vec!["--v=4"], vec![("v", s("4"))]),
        (vec!["-v", "4"], vec![("v", s("4"))]),
        (vec!["-v4"], vec![("v", s("4"))]),
        (vec!["-v=4"], vec![("v", s("4"))]),
        (vec!["-h"], vec![("help", None)]),
    ];
    for (args, want) in cases {
        let want: Vec<(&str, Option<String>)> = want;
        let got: Vec<(&str, Option<String>)> = uses(&args);
        assert_eq!(got, want, "{args:?}");
    }
}

/// A boolean flag never takes the next argument: bare is true, `=false` is false,
/// and `--flag false` leaves `false` as an argument.
#[test]
fn booleans_take_no_separate_value() {
    assert_eq!(uses(&["--fail-swap-on"]), [("fail-swap-on", None)]);
    assert_eq!(
        uses(&["--fail-swap-on=false"]),
        [("fail-swap-on", Some("false".to_owned()))]
    );
    let line = read(&["--rotate-certificates", "false", "--max-pods=3"]).unwrap();
    assert_eq!(line.args, ["false"]);
    assert_eq!(line.uses.len(), 2);
    assert_eq!(line.last("rotate-certificates").as_deref(), Some("true"));
}

#[test]
fn refusals_say_what_upstream_says() {
    let cases: Vec<(Vec<&str>, CommandLineError)> = vec![
        (
            vec!["--bogus-flag"],
            CommandLineError::UnknownFlag("bogus-flag".into()),
        ),
        (
            vec!["--max-pods"],
            CommandLineError::NeedsArgument("--max-pods".into()),
        ),
        (
            vec!["-x"],
            CommandLineError::UnknownShorthand {
                letter: 'x',
                group: "x".into(),
            },
        ),
        (
            vec!["-max-pods=3"],
            CommandLineError::UnknownShorthand {
                letter: 'm',
                group: "max-pods=3".into(),
            },
        ),
        (vec!["---x"], CommandLineError::BadSyntax("---x".into())),
        (vec!["--=x"], CommandLineError::BadSyntax("--=x".into())),
    ];
    for (args, want) in cases {
        assert_eq!(read(&args).unwrap_err(), want, "{args:?}");
    }
    assert_eq!(
        read(&["--bogus-flag"]).unwrap_err().to_string(),
        "unknown flag: --bogus-flag"
    );
}

#[test]
fn double_dash_ends_the_flags() {
    let line = read(&["--max-pods=3", "--", "--port=1", "x"]).unwrap();
    assert_eq!(line.uses.len(), 1);
    assert_eq!(line.args, ["--port=1", "x"]);
}

#[test]
fn repeats_are_all_kept_in_order() {
    let line = read(&[
        "--max-pods=3",
        "--cluster-dns=a",
        "--max-pods=4",
        "--cluster-dns=b",
    ])
    .unwrap();
    assert_eq!(line.last("max-pods").as_deref(), Some("4"));
    assert_eq!(line.uses.len(), 4);
}

#[test]
fn a_subcommand_knows_only_its_flags() {
    let args = vec!["--max-pods=3".to_owned()];
    let err = parse(&args, |s| s.flag == "v").unwrap_err();
    assert_eq!(err, CommandLineError::UnknownFlag("max-pods".into()));
}
