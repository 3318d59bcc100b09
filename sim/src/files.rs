//! Files the simulator writes: seed files, reports and timeline pages, written so that nothing a
//! user owns is ever destroyed and nothing half-written is ever read.
//!
//! Every file goes through [`write_atomically`]: the bytes go to a temporary file beside the
//! target, are flushed to disk, and the temporary file is renamed over the target, after which the
//! directory itself is flushed, so a reader (or a machine that loses power) sees the old file or
//! the whole new one. Only regular files are ever written: an existing device, FIFO or directory
//! at the target is refused, and a symbolic link is written through (its target is replaced, the
//! link stays). [`check_seed_directory`] refuses directories that a sweep must never fill or
//! clean, such as `/` or `/usr`. A temporary file carries the writer's process id in its name, so
//! that [`remove_stale_temporaries`] can tell a crashed writer's leftovers from a live writer's
//! file in progress.
//!
//! This module must not decide what to write or when; it only writes safely.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The marker between a file's name and its writer's process id in a temporary file's name:
/// `.receipt-first-0.json.tmp-4242-Xa3b9c`.
const TEMPORARY_MARKER: &str = ".tmp-";

/// Writes `contents` to `path` atomically and durably. Errors are one line naming the path.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), String> {
    let target = writable_target(path)?;
    let directory = directory_of(&target);
    fs::create_dir_all(&directory)
        .map_err(|error| format!("{} cannot be created ({error})", directory.display()))?;
    let name = target
        .file_name()
        .map_or_else(|| "file".into(), |name| name.to_string_lossy().into_owned());
    let prefix = format!(".{name}{TEMPORARY_MARKER}{}-", std::process::id());
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix);
    // A temporary file is private by default; the file it becomes is an ordinary one, readable
    // as the user's umask allows, like any file an editor saves.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    let mut temporary = builder
        .tempfile_in(&directory)
        .map_err(|error| format!("cannot write into {} ({error})", directory.display()))?;
    let file = temporary.as_file_mut();
    file.write_all(contents)
        .and_then(|()| file.sync_all())
        .map_err(|error| format!("cannot write {} ({error})", target.display()))?;
    // A failed persist hands the temporary file back; dropping it removes it.
    temporary
        .persist(&target)
        .map_err(|error| format!("cannot move {} into place ({})", target.display(), error.error))?;
    sync_directory(&directory);
    Ok(())
}

/// Checks, before long work starts, that [`write_atomically`] will be able to write `path`: it is
/// not (and does not link to) anything but a regular file, its directory exists or can be made,
/// and a file can be created there. Errors are one line.
pub fn check_writable_file(path: &Path) -> Result<(), String> {
    let target = writable_target(path)?;
    let directory = directory_of(&target);
    fs::create_dir_all(&directory)
        .map_err(|error| format!("{} cannot be created ({error})", directory.display()))?;
    tempfile::Builder::new()
        .prefix(&format!(".write-probe{TEMPORARY_MARKER}{}-", std::process::id()))
        .tempfile_in(&directory)
        .map(drop)
        .map_err(|error| format!("{} is not writable ({error})", directory.display()))
}

/// The regular file that writing `path` replaces: `path` itself, or the file a symbolic link at
/// `path` points to. Refuses a directory, a device, a FIFO or a socket, and a link to one.
fn writable_target(path: &Path) -> Result<PathBuf, String> {
    let target = match fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => fs::canonicalize(path).map_err(|error| {
            format!(
                "{} is a symbolic link to a file that cannot be reached ({error})",
                path.display()
            )
        })?,
        _ => path.to_path_buf(),
    };
    match fs::metadata(&target) {
        Ok(metadata) if metadata.is_file() => Ok(target),
        Ok(metadata) => Err(format!(
            "{} is {}, not a regular file, and is never replaced",
            target.display(),
            kind_of(&metadata)
        )),
        // A path below a file fails later, where its directory cannot be created.
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(target)
        }
        Err(error) => Err(format!("{} cannot be inspected ({error})", target.display())),
    }
}

/// What a non-regular file is, for error messages.
fn kind_of(metadata: &fs::Metadata) -> &'static str {
    if metadata.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let kind = metadata.file_type();
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

/// Flushes a directory's entries, so that a rename survives a power loss. Best effort: not every
/// platform or file system lets a directory be opened or flushed, and the rename itself is done.
fn sync_directory(directory: &Path) {
    #[cfg(unix)]
    if let Ok(handle) = fs::File::open(directory) {
        let _ = handle.sync_all();
    }
    #[cfg(not(unix))]
    let _ = directory;
}

/// The directory `path` is in; `.` for a bare file name.
pub fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Directories a sweep must never write seed files into or clean temporary files out of: the
/// root and the system's own trees. A user who names one has mistyped.
const SYSTEM_DIRECTORIES: [&str; 14] = [
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr",
    "/var", "/snap",
];

/// Refuses `/`, the system's directories and anything inside them as a seed directory. The path
/// is judged after symbolic links and `..` are resolved, as far as it exists.
pub fn check_seed_directory(directory: &Path) -> Result<(), String> {
    let resolved = resolve_existing_prefix(directory);
    let refused = resolved == Path::new("/")
        || SYSTEM_DIRECTORIES
            .iter()
            .any(|system| resolved.starts_with(system));
    if refused {
        return Err(format!(
            "{} is {}, where a sweep must not write or clean files; choose a directory of your own, such as seeds",
            directory.display(),
            if resolved == Path::new("/") {
                "the root directory".to_owned()
            } else {
                format!("a system directory ({})", resolved.display())
            }
        ));
    }
    Ok(())
}

/// `path` with its longest existing prefix canonicalized and the rest appended as written.
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_or_else(|_| path.to_path_buf(), |current| current.join(path))
    };
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(resolved) = fs::canonicalize(existing) {
            let mut full = resolved;
            for part in rest.iter().rev() {
                full.push(part);
            }
            return full;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// Removes the temporary files that writers which no longer run left in `directory` (a sweep
/// killed mid-write leaves one). A file whose writer is still alive, or whose writer cannot be
/// told, is left alone. Returns how many were removed.
pub fn remove_stale_temporaries(directory: &Path) -> usize {
    let Ok(entries) = fs::read_dir(directory) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = writer_of(&name) else {
            continue;
        };
        if pid != std::process::id() && process_is_gone(pid) && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The process id in a temporary file's name (`.NAME.tmp-PID` or `.NAME.tmp-PID-RANDOM`), if the
/// name is one.
fn writer_of(name: &str) -> Option<u32> {
    if !name.starts_with('.') {
        return None;
    }
    let (_, after) = name.rsplit_once(TEMPORARY_MARKER)?;
    let digits = after.split('-').next()?;
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether no process with id `pid` exists.
fn process_is_gone(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
        let result = unsafe { libc::kill(pid, 0) };
        result == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// `text` cut to at most `limit` characters, with `...` and the full length when it was cut, for
/// error messages that quote what a user gave.
pub fn clip(text: &str, limit: usize) -> String {
    let length = text.chars().count();
    if length <= limit {
        return text.to_owned();
    }
    let kept: String = text.chars().take(limit).collect();
    format!("{kept}... ({length} characters)")
}

/// `message` with every quoted part (between double quotes or backticks) cut to at most `limit`
/// characters (see [`clip`]), and the whole cut to a few lines' worth: a parser's error quotes the
/// value it refused, and a value can be megabytes long.
pub fn clip_quoted(message: &str, limit: usize) -> String {
    let mut clipped = String::with_capacity(message.len().min(4 * limit));
    let mut quote: Option<char> = None;
    let mut quoted = String::new();
    for character in message.chars() {
        match quote {
            Some(open) if character == open => {
                clipped.push_str(&clip(&quoted, limit));
                clipped.push(character);
                quoted.clear();
                quote = None;
            }
            Some(_) => quoted.push(character),
            None => {
                clipped.push(character);
                if character == '"' || character == '`' {
                    quote = Some(character);
                }
            }
        }
    }
    // An unclosed quote: what follows it is the value, cut short too.
    clipped.push_str(&clip(&quoted, limit));
    clip(&clipped, 3 * limit.max(40))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!("commitgap-files-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&directory);
        fs::create_dir_all(&directory).unwrap();
        directory
    }

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_stays() {
        let directory = scratch("replace");
        let path = directory.join("report.json");
        check_writable_file(&path).unwrap();
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let plain = directory.join("plain");
            fs::write(&plain, b"").unwrap();
            let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode();
            assert_eq!(
                mode(&path),
                mode(&plain),
                "permissions as any new file gets them, not a temporary file's"
            );
            fs::remove_file(plain).unwrap();
        }
        let names: Vec<String> = fs::read_dir(&directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["report.json"]);
    }

    #[cfg(unix)]
    #[test]
    fn special_files_are_refused_and_links_are_written_through() {
        let directory = scratch("special");
        assert!(
            check_writable_file(&directory)
                .unwrap_err()
                .contains("a directory")
        );
        assert!(write_atomically(&directory, b"x").is_err());
        assert!(
            check_writable_file(Path::new("/dev/null"))
                .unwrap_err()
                .contains("a device")
        );
        let fifo = directory.join("pipe");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status();
        if status.is_ok_and(|status| status.success()) {
            assert!(write_atomically(&fifo, b"x").unwrap_err().contains("a FIFO"));
        }
        let real = directory.join("real.json");
        fs::write(&real, b"old").unwrap();
        let link = directory.join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
        let dangling = directory.join("dangling.json");
        std::os::unix::fs::symlink(directory.join("missing/x.json"), &dangling).unwrap();
        assert!(
            write_atomically(&dangling, b"x")
                .unwrap_err()
                .contains("symbolic link")
        );
        let below_a_file = real.join("x.json");
        assert!(check_writable_file(&below_a_file).is_err());
    }

    #[test]
    fn system_directories_are_refused_as_seed_directories() {
        for refused in ["/", "/usr", "/usr/lib", "/etc/", "/proc/self", "/var/../usr"] {
            let error = check_seed_directory(Path::new(refused)).unwrap_err();
            assert!(
                error.contains("choose a directory of your own"),
                "{refused}: {error}"
            );
        }
        check_seed_directory(Path::new("seeds")).unwrap();
        check_seed_directory(&scratch("fine")).unwrap();
        check_seed_directory(&scratch("fine").join("not/yet/made")).unwrap();
    }

    #[test]
    fn temporaries_of_dead_writers_go_and_others_stay() {
        let directory = scratch("stale");
        let live = format!(".a.json.tmp-{}-xyz", std::process::id());
        // Process ids stay below 2^22 on Linux; these cannot be running.
        let dead = ".b.json.tmp-9999999";
        let dead_new_style = ".c.json.tmp-9999998-abc";
        for name in [live.as_str(), dead, dead_new_style, "d.json", ".e.json"] {
            fs::write(directory.join(name), b"").unwrap();
        }
        let removed = remove_stale_temporaries(&directory);
        let mut left: Vec<String> = fs::read_dir(&directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        if cfg!(unix) {
            assert_eq!(removed, 2);
            assert_eq!(left, [live.as_str(), ".e.json", "d.json"]);
        }
    }

    #[test]
    fn long_values_are_clipped_with_their_length() {
        assert_eq!(clip("short", 80), "short");
        let long = "x".repeat(100);
        let clipped = clip(&long, 80);
        assert!(clipped.starts_with(&"x".repeat(80)));
        assert!(clipped.ends_with("... (100 characters)"));
        let message = format!("unknown variant `{long}`; invalid type: string \"{long}\", expected u32");
        let quoted = clip_quoted(&message, 10);
        assert_eq!(
            quoted,
            "unknown variant `xxxxxxxxxx... (100 characters)`; invalid type: string \"xxxxxxxxxx... (100 characters)\", expected u32"
        );
    }
}
