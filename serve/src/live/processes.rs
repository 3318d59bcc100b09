//! The processes a live check runs: copies of the served program (receivers, relay workers, the
//! purge job, the operator), each started with its own arguments and log file, and killed,
//! paused, resumed and restarted as the faults say.
//!
//! No process may outlive the check. Every child asks the kernel to kill it when the thread that
//! started it ends (`PR_SET_PDEATHSIG`), so even a check that is itself killed leaves nothing
//! behind; a fleet that is dropped kills what is still running; [`Fleet::stop_all`] asks each to
//! stop (SIGTERM) first, as a deployment would. Children must therefore be started from one
//! long-lived thread (the check's main thread): the signal follows the starting thread, not the
//! process. This module must not judge anything: it only runs processes and counts what it did.

use std::fs::{File, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::service::Launch;

/// One process of the fleet.
struct Member {
    name: String,
    launch: Launch,
    child: Option<Child>,
    paused: bool,
    log: PathBuf,
    /// A job that runs once and ends (the purge job, the operator), not a service to restart.
    job: bool,
}

/// The running copies of the program. See the module documentation.
pub struct Fleet {
    program: PathBuf,
    /// Arguments every copy gets first (`--system NAME`).
    leading: Vec<String>,
    logs: PathBuf,
    members: Vec<Member>,
    /// How many times each name has been started: the name of a start after the first carries
    /// its number (`relay-1#2`).
    starts: std::collections::BTreeMap<String, u32>,
}

impl Fleet {
    /// A fleet of copies of `program`, each started with `leading` before its own arguments,
    /// writing its standard output and error to a file in `logs`.
    pub fn new(program: PathBuf, leading: Vec<String>, logs: &Path) -> Fleet {
        Fleet {
            program,
            leading,
            logs: logs.to_owned(),
            members: Vec::new(),
            starts: std::collections::BTreeMap::new(),
        }
    }

    /// The fleet's program started with `arguments` after the leading ones.
    pub fn copy(&self, arguments: Vec<String>) -> Launch {
        Launch {
            program: self.program.display().to_string(),
            arguments: self.leading.iter().cloned().chain(arguments).collect(),
            environment: Vec::new(),
            directory: PathBuf::from("."),
        }
    }

    /// Starts a service called `name` (which names its log file) as `launch` says; its index.
    pub fn start(&mut self, name: &str, launch: Launch) -> Result<usize, String> {
        self.start_member(name, launch, false)
    }

    /// Starts a job that runs once and ends: [`Fleet::exited`] does not report it, and
    /// [`Fleet::wait_for`] collects it.
    pub fn start_job(&mut self, name: &str, launch: Launch) -> Result<usize, String> {
        self.start_member(name, launch, true)
    }

    fn start_member(&mut self, name: &str, launch: Launch, job: bool) -> Result<usize, String> {
        let log = self.logs.join(format!("{name}.log"));
        let mut member = Member {
            name: name.to_owned(),
            launch,
            child: None,
            paused: false,
            log,
            job,
        };
        let start = self.next_start(name);
        member.child = Some(self.spawn(&member, &start)?);
        self.members.push(member);
        Ok(self.members.len() - 1)
    }

    /// The name of the next start of `name`: the name itself, then `name#2`, `name#3`, ...
    fn next_start(&mut self, name: &str) -> String {
        let count = self.starts.entry(name.to_owned()).or_insert(0);
        *count += 1;
        if *count == 1 {
            name.to_owned()
        } else {
            format!("{name}#{count}")
        }
    }

    fn spawn(&self, member: &Member, start: &str) -> Result<Child, String> {
        let log = open_log(&member.log)?;
        let error_log = log
            .try_clone()
            .map_err(|error| format!("{}: {error}", member.log.display()))?;
        let launch = &member.launch.named(start);
        let mut command = Command::new(&launch.program);
        command
            .args(&launch.arguments)
            .envs(launch.environment.iter().map(|(name, value)| (name, value)))
            .current_dir(&launch.directory)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(error_log);
        // SAFETY: prctl is async-signal-safe and touches only the new process.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command.spawn().map_err(|error| {
            format!(
                "cannot start {} ({} in {}): {error}",
                member.name,
                launch.program,
                launch.directory.display()
            )
        })
    }

    /// The name of process `index`.
    pub fn name(&self, index: usize) -> &str {
        &self.members[index].name
    }

    /// Whether process `index` is running (not killed, not exited).
    pub fn is_running(&self, index: usize) -> bool {
        self.members[index].child.is_some()
    }

    /// Whether process `index` is paused.
    pub fn is_paused(&self, index: usize) -> bool {
        self.members[index].paused
    }

    /// Kills process `index` with SIGKILL, as a crash or an OOM kill does, and reaps it.
    pub fn kill(&mut self, index: usize) {
        let member = &mut self.members[index];
        if let Some(mut child) = member.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        member.paused = false;
    }

    /// Starts process `index` again with its arguments, after a kill or an exit.
    pub fn restart(&mut self, index: usize) -> Result<(), String> {
        if self.members[index].child.is_some() {
            return Ok(());
        }
        let name = self.members[index].name.clone();
        let start = self.next_start(&name);
        let child = self.spawn(&self.members[index], &start)?;
        self.members[index].child = Some(child);
        Ok(())
    }

    /// Pauses process `index` (SIGSTOP), as a stopped VM or a long GC pause does.
    pub fn pause(&mut self, index: usize) {
        let member = &mut self.members[index];
        if let Some(child) = &member.child {
            signal(child, libc::SIGSTOP);
            member.paused = true;
        }
    }

    /// Resumes a paused process (SIGCONT).
    pub fn resume(&mut self, index: usize) {
        let member = &mut self.members[index];
        if let Some(child) = &member.child
            && member.paused
        {
            signal(child, libc::SIGCONT);
        }
        member.paused = false;
    }

    /// Services that ended on their own since the last look: each name with its exit status.
    pub fn exited(&mut self) -> Vec<(usize, String, ExitStatus)> {
        let mut ended = Vec::new();
        for (index, member) in self.members.iter_mut().enumerate() {
            if member.job {
                continue;
            }
            if let Some(child) = &mut member.child
                && let Ok(Some(status)) = child.try_wait()
            {
                member.child = None;
                ended.push((index, member.name.clone(), status));
            }
        }
        ended
    }

    /// Waits up to `bound` for process `index` to end on its own; its status, or `None` if it
    /// is still running.
    pub fn wait_for(&mut self, index: usize, bound: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            let member = &mut self.members[index];
            let child = member.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                member.child = None;
                return Some(status);
            }
            if started.elapsed() >= bound {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last line process `index` wrote, for an error message.
    pub fn last_line(&self, index: usize) -> String {
        std::fs::read_to_string(&self.members[index].log)
            .ok()
            .and_then(|text| {
                text.lines()
                    .rev()
                    .find(|line| !line.trim().is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "(it wrote nothing)".to_owned())
    }

    /// The last lines process `index` wrote (at most five, joined by ` | `), for an error
    /// message about a process that would not start: a foreign program's reason is often a
    /// traceback whose last line alone does not say where.
    pub fn last_lines(&self, index: usize) -> String {
        const LINES_MAX: usize = 5;
        let text = std::fs::read_to_string(&self.members[index].log).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim_end)
            .filter(|line| !line.trim().is_empty())
            .collect();
        if lines.is_empty() {
            return "(it wrote nothing)".to_owned();
        }
        lines[lines.len().saturating_sub(LINES_MAX)..].join(" | ")
    }

    /// Stops every process as a deployment does: resume the paused, SIGTERM, wait up to `grace`
    /// for each to finish what it was doing, then SIGKILL what is left. Returns the names of
    /// those that had to be killed.
    pub fn stop_all(&mut self, grace: Duration) -> Vec<String> {
        for member in &mut self.members {
            if let Some(child) = &member.child {
                if member.paused {
                    signal(child, libc::SIGCONT);
                    member.paused = false;
                }
                signal(child, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        let mut killed = Vec::new();
        for member in &mut self.members {
            let Some(mut child) = member.child.take() else {
                continue;
            };
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    killed.push(member.name.clone());
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        killed
    }
}

impl Drop for Fleet {
    /// Nothing outlives the fleet: whatever still runs is killed and reaped.
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn signal(child: &Child, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill has no memory effects; the pid is our own unreaped child.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

fn open_log(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Fleet;
    use crate::service::Launch;

    #[test]
    fn each_start_of_a_name_has_a_name_of_its_own() {
        let logs = std::env::temp_dir().join(format!("commitgap-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&logs).unwrap();
        let mut fleet = Fleet::new("sh".into(), Vec::new(), &logs);
        let launch = Launch {
            program: "sh".to_owned(),
            arguments: vec![
                "-c".to_owned(),
                format!("echo started as {}", Launch::PROCESS_NAME),
            ],
            environment: vec![("COMMITGAP_PROCESS".to_owned(), Launch::PROCESS_NAME.to_owned())],
            directory: ".".into(),
        };
        let first = fleet.start_job("purge", launch.clone()).unwrap();
        assert!(fleet.wait_for(first, Duration::from_secs(10)).is_some());
        fleet.restart(first).unwrap();
        assert!(fleet.wait_for(first, Duration::from_secs(10)).is_some());
        let second = fleet.start_job("purge", launch).unwrap();
        assert!(fleet.wait_for(second, Duration::from_secs(10)).is_some());
        let log = std::fs::read_to_string(logs.join("purge.log")).unwrap();
        let names: Vec<&str> = log.lines().collect();
        assert_eq!(
            names,
            ["started as purge", "started as purge#2", "started as purge#3"]
        );
        std::fs::remove_dir_all(&logs).unwrap();
    }
}
