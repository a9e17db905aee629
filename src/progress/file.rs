//! The progress record in a local file, replaced atomically (write, sync, rename).

use std::io::Write;
use std::path::PathBuf;

use super::{ProgressError, ProgressRecord, ProgressStore};

pub struct FileProgressStore {
    path: PathBuf,
}

impl FileProgressStore {
    pub fn new(path: PathBuf) -> Self {
        FileProgressStore { path }
    }
}

impl ProgressStore for FileProgressStore {
    fn load(&mut self) -> Result<Option<ProgressRecord>, ProgressError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => ProgressRecord::from_json(&text)
                .map(Some)
                .map_err(|source| ProgressError::Corrupt {
                    place: self.path.display().to_string(),
                    source,
                }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(ProgressError::io(format!("read {}", self.path.display()))(error)),
        }
    }

    fn save(&mut self, record: &ProgressRecord) -> Result<(), ProgressError> {
        let mut temporary = self.path.clone().into_os_string();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        let mut file =
            std::fs::File::create(&temporary).map_err(ProgressError::io(format!("create {}", temporary.display())))?;
        file.write_all(record.to_json().as_bytes())
            .map_err(ProgressError::io(format!("write {}", temporary.display())))?;
        file.sync_all().map_err(ProgressError::io("sync the progress record"))?;
        std::fs::rename(&temporary, &self.path)
            .map_err(ProgressError::io(format!("replace {}", self.path.display())))?;
        // The rename is durable once the directory is synced.
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::File::open(parent)
                .and_then(|directory| directory.sync_all())
                .map_err(ProgressError::io(format!("sync {}", parent.display())))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_record_loads_back_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = FileProgressStore::new(dir.path().join("progress.json"));
        assert_eq!(store.load().unwrap(), None);
        let record = ProgressRecord {
            offsets: [(("products".to_owned(), 1), 5)].into_iter().collect(),
            time: 9,
        };
        store.save(&record).unwrap();
        assert_eq!(store.load().unwrap(), Some(record));
    }
}
