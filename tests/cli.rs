//! End-to-end tests of the `cram` binary: real processes, real files, exit codes.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn cram(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cram")).args(args).env_remove("CRAM_DB_DIR").output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cram-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    stdout(o).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn solve_prints_outcome_and_nimber() {
    let o = cram(&["solve", "3x6", "4x4", "..#/..."]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("3x6: first player wins, nimber *4"), "{out}");
    assert!(out.contains("4x4: second player wins, nimber *0"), "{out}");
    assert!(out.contains("..#/...: second player wins, nimber *0"), "{out}");
}

/// `--search sets` (set queries, kept to compare) gives the default search's answers, in
/// both modes and on two threads, with a different node count; it is an engine-path option.
#[test]
fn set_queries_answer_as_the_default_search() {
    let specs = ["3x9", "4x6", "5x5", "1x20", "....#..../....#..../....#...."];
    for extra in [&["--threads", "1"][..], &["--threads", "2", "--outcome-only"]] {
        let run = |search: &str| {
            let mut args = vec!["solve", "--json", "--no-db", "--search", search];
            args.extend_from_slice(extra);
            args.extend_from_slice(&specs);
            let o = cram(&args);
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
            json_lines(&o)
        };
        let (values, sets) = (run("values"), run("sets"));
        for (v, s) in values.iter().zip(&sets) {
            assert_eq!((&v["outcome"], &v["nimber"]), (&s["outcome"], &s["nimber"]), "{v} / {s}");
        }
        let nodes = |l: &[serde_json::Value]| l.iter().map(|v| v["nodes"].as_u64().unwrap()).sum::<u64>();
        assert_ne!(nodes(&values), nodes(&sets), "the two searches are not the same search");
    }
    let o = cram(&["solve", "3x4", "--workers", "1", "--search", "sets"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn json_has_the_documented_fields() {
    let o = cram(&["solve", "3x5", "2x4", "--json"]);
    assert!(o.status.success());
    let v = json_lines(&o);
    assert_eq!(v.len(), 2);
    assert_eq!(v[0]["spec"], "3x5");
    assert_eq!((v[0]["rows"].as_u64(), v[0]["cols"].as_u64(), v[0]["empty"].as_u64()), (Some(3), Some(5), Some(15)));
    assert_eq!(v[0]["outcome"], "first");
    assert_eq!(v[0]["nimber"], 1);
    assert!(v[0]["nodes"].is_u64() && v[0]["millis"].is_u64());
    assert_eq!(v[1]["outcome"], "second");
    assert_eq!(v[1]["nimber"], 0);
}

#[test]
fn outcome_only_leaves_first_player_wins_without_nimber() {
    let o = cram(&["solve", "3x6", "5x5", "--json", "--outcome-only", "--no-pairing"]);
    let v = json_lines(&o);
    assert_eq!(v[0]["outcome"], "first");
    assert!(v[0]["nimber"].is_null());
    assert_eq!(v[1]["outcome"], "second");
    assert_eq!(v[1]["nimber"], 0);
}

#[test]
fn bad_input_exits_2_with_a_reason() {
    for (spec, why) in [
        ("9x15", "at most 128"),
        ("0x4", "no cells"),
        ("../.", "row 2 has 1 cells"),
        ("..a/...", "only '.' (empty) and '#'"),
        ("banana", "cannot read"),
        ("@/nonexistent/board.txt", "No such file"),
    ] {
        let o = cram(&["solve", spec]);
        assert_eq!(o.status.code(), Some(2), "{spec}");
        assert!(stderr(&o).contains(why), "{spec}: {}", stderr(&o));
        assert_eq!(stderr(&o).matches("cram: error").count(), 1, "{}", stderr(&o));
    }
    let o = cram(&["solve", "--tt-mb", "0", "3x3"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn board_files_and_batches() {
    let dir = scratch("batch");
    let board = dir.join("board.txt");
    std::fs::write(&board, "..#.\n....\n....\n\n").unwrap();
    let at = format!("@{}", board.display());
    let o = cram(&["solve", &at, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json_lines(&o)[0]["empty"], 11);

    let batch = dir.join("batch.txt");
    std::fs::write(&batch, "; a comment\n3x4\n\n#.../....\n2x5\n").unwrap();
    let o = cram(&["solve", "--batch", batch.to_str().unwrap(), "--json"]);
    let v = json_lines(&o);
    let specs: Vec<&str> = v.iter().map(|x| x["spec"].as_str().unwrap()).collect();
    assert_eq!(specs, ["3x4", "#.../....", "2x5"]);
    assert_eq!(v[0]["nimber"], 1);
    assert_eq!(v[2]["nimber"], 1);

    // From standard input, with one bad line reported in place.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cram"))
        .args(["solve", "--batch", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"2x2\nnonsense\n1x6\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let v = json_lines(&o);
    assert_eq!(v.len(), 3);
    assert_eq!(v[0]["nimber"], 0);
    assert!(v[1]["error"].as_str().unwrap().contains("nonsense"));
    assert_eq!(v[2]["nimber"], 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn analyze_lists_moves_consistent_with_solve() {
    let o = cram(&["analyze", "3x4", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["nimber"], 1);
    let moves = v["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 17);
    for m in moves {
        let n = m["nimber"].as_u64().unwrap();
        assert_eq!(m["wins"].as_bool().unwrap(), n == 0);
        // Play the move on the board and solve it separately.
        let mut rows = vec![vec!['.'; 4]; 3];
        for cell in m["cells"].as_array().unwrap() {
            let (r, c) = (cell[0].as_u64().unwrap() as usize, cell[1].as_u64().unwrap() as usize);
            rows[r - 1][c - 1] = '#';
        }
        let spec: Vec<String> = rows.iter().map(|r| r.iter().collect()).collect();
        let s = cram(&["solve", &spec.join("/"), "--json"]);
        assert_eq!(json_lines(&s)[0]["nimber"].as_u64(), Some(n));
    }
    assert!(stdout(&cram(&["analyze", "2x3"])).contains("winning"));
}

#[test]
fn databases_build_inspect_verify_use_and_refuse() {
    let dir = scratch("db");
    let d = dir.to_str().unwrap();
    let o = cram(&["db", "build", "3x4", "--out", d]);
    assert!(o.status.success(), "{}", stderr(&o));
    let file = dir.join("cram-3x4.cramdb");
    let f = file.to_str().unwrap();
    let info = stdout(&cram(&["db", "info", f]));
    assert!(info.contains("3x4") && info.contains("4096") || info.contains("4,096"), "{info}");
    assert!(info.contains("largest nimber   4"), "{info}");
    let v = cram(&["db", "verify", f, "--samples", "300"]);
    assert!(v.status.success() && stdout(&v).contains("300 sampled entries agree"), "{}", stdout(&v));

    // Solving with and without the database agrees, and the database saves search.
    let with = json_lines(&cram(&["solve", "4x5", "--db-dir", d, "--json"]));
    let without = json_lines(&cram(&["solve", "4x5", "--no-db", "--json"]));
    assert_eq!(with[0]["nimber"], without[0]["nimber"]);
    assert!(with[0]["nodes"].as_u64() < without[0]["nodes"].as_u64());
    // CRAM_DB_DIR is the default directory.
    let env = Command::new(env!("CARGO_BIN_EXE_cram"))
        .args(["solve", "3x4", "--json"])
        .env("CRAM_DB_DIR", d)
        .output()
        .unwrap();
    assert_eq!(json_lines(&env)[0]["nodes"], 0);

    // A corrupt database is refused with exit code 3, naming the file.
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    for args in [vec!["solve", "3x4", "--db-dir", d], vec!["db", "verify", f], vec!["db", "info", f]] {
        let o = cram(&args);
        assert_eq!(o.status.code(), Some(3), "{args:?}");
        assert!(stderr(&o).contains("cram-3x4.cramdb") && stderr(&o).contains("checksum"), "{}", stderr(&o));
    }
    // An explicit database directory that does not exist is an error, not silence.
    let o = cram(&["solve", "3x4", "--db-dir", "/nonexistent/dbs"]);
    assert_eq!(o.status.code(), Some(3));
    // Impossible sizes.
    assert_eq!(cram(&["db", "build", "6x6", "--out", d]).status.code(), Some(2));
    assert_eq!(cram(&["db", "build", "..#", "--out", d]).status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_is_available_for_every_command() {
    for cmd in [
        vec!["--help"],
        vec!["solve", "--help"],
        vec!["analyze", "--help"],
        vec!["db", "--help"],
        vec!["db", "build", "--help"],
        vec!["bench", "--help"],
    ] {
        let o = cram(&cmd);
        assert!(o.status.success(), "{cmd:?}");
        assert!(stdout(&o).contains("Usage"), "{cmd:?}");
    }
}

#[test]
fn bench_prints_a_table() {
    let o = cram(&["bench", "--boards", "3x5,2x6", "--timeout-secs", "60"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("| 3x5 | *1 |") && out.contains("| 2x6 | *0 |"), "{out}");
}

#[test]
fn octal_reports_a_proved_period() {
    let o = cram(&["octal", "0.07", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!((v["period"].as_u64(), v["preperiod"].as_u64()), (Some(34), Some(53)));
    assert_eq!(v["values"].as_array().unwrap().len(), 2001);
    assert_eq!(v["values"][16], 5);
    let short = cram(&["octal", "0.77", "--max", "50", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&short).trim()).unwrap();
    assert!(v["period"].is_null());
    assert!(stdout(&cram(&["octal", "0.77"])).contains("period 12 from heap 71"));
    assert_eq!(cram(&["octal", "1.9"]).status.code(), Some(2));
}

#[test]
fn pairing_names_symmetries_failures_and_audits() {
    let o = cram(&["pairing", "4x6", "--audit", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let syms = v["symmetries"].as_array().unwrap();
    assert_eq!(syms.len(), 7);
    let half = &syms[0];
    assert_eq!(half["name"], "half-turn");
    assert_eq!(half["pairing"], true);
    assert_eq!(half["audit"]["positions"], 624);
    assert!(half["audit"]["failure"].is_null());
    assert_eq!(syms[1]["failure"], "not-a-symmetry");
    assert_eq!(syms[3]["name"], "reflect-rows");
    assert_eq!(syms[3]["failure"], "self-mapped-domino");
    let text = stdout(&cram(&["pairing", "3x3", "--audit"]));
    assert!(text.contains("half-turn             fixed-cell (2,2)"), "{text}");
    assert!(text.contains("audit: fails after 2 positions"), "{text}");
    assert_eq!(cram(&["pairing", "3x"]).status.code(), Some(2));
}

#[test]
fn shapes_reproduce_seed_003_under_its_convention() {
    let o = cram(&["shapes", "8", "--up-to", "flips", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let shapes = v["shapes"].as_array().unwrap();
    assert_eq!(shapes.len(), 1042);
    let p_positions = shapes.iter().filter(|s| s["nimber"] == 0).count();
    let paired: Vec<_> = shapes.iter().filter(|s| !s["pairings"].as_array().unwrap().is_empty()).collect();
    assert_eq!((p_positions, paired.len()), (74, 12));
    for s in &paired {
        assert_eq!(s["nimber"], 0, "a paired shape must be a second-player win");
        assert_eq!(s["pairings"], serde_json::json!(["half-turn"]));
        assert_eq!(s["cells"].as_u64().unwrap() % 2, 0, "odd shapes cannot be paired");
    }
    let rows = v["by_size"].as_array().unwrap();
    let without: u64 =
        rows.iter().map(|r| r["shapes"].as_u64().unwrap() - r["with_involution"].as_u64().unwrap()).sum();
    assert_eq!(without, 852);
    // Standard free polyomino counts, and N = 10 well within a minute.
    let o = cram(&["shapes", "10", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let counts: Vec<u64> = v["by_size"].as_array().unwrap().iter().map(|r| r["shapes"].as_u64().unwrap()).collect();
    assert_eq!(counts, [1, 1, 2, 5, 12, 35, 108, 369, 1285, 4655]);
    assert_eq!(cram(&["shapes", "13"]).status.code(), Some(2));
}

#[test]
fn root_check_prints_the_depth_profile() {
    let o = cram(&["root-check", "4x5", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let d = v["depths"].as_array().unwrap();
    assert_eq!(d.len(), 11);
    assert_eq!((d[1]["wins"].as_u64(), d[1]["fires"].as_u64()), (Some(26), Some(10)));
    let wrong: u64 = d.iter().map(|r| r["unsound_wrong"].as_u64().unwrap()).sum();
    assert_eq!(wrong, 1026);
    assert!(stdout(&cram(&["root-check", "3x4"])).contains("| 1 | 17 |"));
    assert_eq!(cram(&["root-check", "6x6", "--max-positions", "1000"]).status.code(), Some(2));
}

#[test]
fn table_shows_values_and_what_is_known() {
    let o = cram(&["table", "--rows", "1..3", "--cols", "1..6", "--format", "csv", "--no-db"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "rows,1,2,3,4,5,6");
    assert_eq!(lines[1], "1,*0,*1,*1,*2,*0,*3");
    assert_eq!(lines[2], "2,*1,*0,*1,*0,*1,*0");
    assert_eq!(lines[3], "3,*1,*1,*0,*1,*1,*4");
    // No time at all: what the theory says is shown instead of a value.
    let o = cram(&["table", "--rows", "4..5", "--cols", "9..10", "--budget-secs", "0", "--no-db"]);
    let out = stdout(&o);
    assert!(out.contains("| 4 | N (strategy) | *0 |"), "{out}");
    assert!(out.contains("| 5 | ? | N (strategy) |"), "{out}");
    let svg = stdout(&cram(&["table", "--rows", "1..2", "--cols", "1..3", "--format", "svg"]));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert_eq!(doc.descendants().filter(|n| n.has_tag_name("rect")).count(), 6);
    assert_eq!(cram(&["table", "--rows", "3..1", "--cols", "1..2"]).status.code(), Some(2));
}

#[test]
fn show_draws_the_winning_moves() {
    let dir = scratch("show");
    let file = dir.join("p.svg");
    let o = cram(&["show", "..#./..../....", "--svg", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&file).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let drawn: Vec<String> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("win"))
        .map(|n| n.attribute("data-move").unwrap().to_string())
        .collect();
    // The same winning moves as `cram analyze`.
    let a: serde_json::Value =
        serde_json::from_str(stdout(&cram(&["analyze", "..#./..../....", "--json"])).trim()).unwrap();
    let mut wins: Vec<String> = a["moves"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["wins"] == true)
        .map(|m| {
            let c = &m["cells"];
            format!("({},{})-({},{})", c[0][0], c[0][1], c[1][0], c[1][1])
        })
        .collect();
    let mut drawn_sorted = drawn.clone();
    drawn_sorted.sort();
    wins.sort();
    assert_eq!(drawn_sorted, wins);
    assert!(!wins.is_empty());
    // Every move's resulting nimber is written.
    let values = doc.descendants().filter(|n| n.attribute("class").is_some_and(|c| c.starts_with("value"))).count();
    assert_eq!(values, a["moves"].as_array().unwrap().len());
    let filled = doc.descendants().filter(|n| n.attribute("class") == Some("filled")).count();
    assert_eq!(filled, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
