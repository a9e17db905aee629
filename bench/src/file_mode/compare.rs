//! Byte-for-byte comparison of two output files, streamed so that the bench's own memory
//! (the floor under every child's peak) stays small whatever their size.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{bail, Context};

/// Fails, naming the first differing line, unless the files hold the same bytes.
pub fn identical(expected: &Path, actual: &Path) -> anyhow::Result<()> {
    let open = |path: &Path| {
        File::open(path)
            .map(|file| BufReader::with_capacity(1 << 20, file))
            .with_context(|| format!("cannot open {}", path.display()))
    };
    let (mut left, mut right) = (open(expected)?, open(actual)?);
    let (mut left_line, mut right_line) = (Vec::new(), Vec::new());
    for line in 1.. {
        left_line.clear();
        right_line.clear();
        let left_read = left.read_until(b'\n', &mut left_line)?;
        let right_read = right.read_until(b'\n', &mut right_line)?;
        if left_line != right_line {
            bail!(
                "{} and {} differ at line {line}:\n  {}\n  {}",
                expected.display(),
                actual.display(),
                String::from_utf8_lossy(&left_line).trim_end(),
                String::from_utf8_lossy(&right_line).trim_end()
            );
        }
        if left_read == 0 && right_read == 0 {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_equal_files_from_different_ones() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let a = write("a", "one\ntwo\n");
        let b = write("b", "one\ntwo\n");
        let shorter = write("c", "one\n");
        let changed = write("d", "one\nTwo\n");
        identical(&a, &b).expect("the same bytes");
        let error = identical(&a, &shorter).expect_err("a missing line");
        assert!(error.to_string().contains("line 2"), "{error}");
        let error = identical(&a, &changed).expect_err("a changed line");
        assert!(error.to_string().contains("Two"), "{error}");
    }
}
