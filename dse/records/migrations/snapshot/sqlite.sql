-- dse record store schema at revision 0019: made by `python -m dse.records.snapshot`, not by hand
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
)
-- next statement
CREATE TABLE candidate (
	id INTEGER NOT NULL, 
	experiment_id INTEGER NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	origin VARCHAR(16) NOT NULL, 
	diff JSON NOT NULL, 
	created_at DATETIME NOT NULL, why TEXT, notes TEXT, config_id INTEGER, mapping_id INTEGER, 
	CONSTRAINT pk_candidate PRIMARY KEY (id), 
	CONSTRAINT fk_candidate_experiment_id_experiment FOREIGN KEY(experiment_id) REFERENCES experiment (id), 
	CONSTRAINT uq_candidate_experiment_id_hash UNIQUE (experiment_id, hash)
)
-- next statement
CREATE TABLE "experiment" (
	id INTEGER NOT NULL, 
	name VARCHAR NOT NULL, 
	hypothesis TEXT NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	acceptance JSON NOT NULL, 
	workload_recipe VARCHAR NOT NULL, 
	workload_hash VARCHAR(64) NOT NULL, 
	baseline_candidate_id INTEGER, 
	spec_text TEXT NOT NULL, 
	spec_hash VARCHAR(64) NOT NULL, 
	limitations TEXT NOT NULL, 
	open_questions TEXT NOT NULL, 
	created_at DATETIME NOT NULL, workload JSON, judged_run_id INTEGER, 
	CONSTRAINT pk_experiment PRIMARY KEY (id), 
	CONSTRAINT uq_experiment_name UNIQUE (name), 
	CONSTRAINT fk_experiment_baseline_candidate_id_candidate FOREIGN KEY(baseline_candidate_id) REFERENCES candidate (id)
)
-- next statement
CREATE TABLE run (
	id INTEGER NOT NULL, 
	candidate_id INTEGER NOT NULL, 
	stage VARCHAR(16) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	reason TEXT, 
	error TEXT, 
	traceback TEXT, 
	started_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	heartbeat_at DATETIME, 
	host VARCHAR, 
	git_commit VARCHAR(40), 
	git_dirty BOOLEAN, 
	versions JSON NOT NULL, 
	command TEXT NOT NULL, 
	seed INTEGER, 
	model_version VARCHAR NOT NULL, 
	emulator_version VARCHAR, pid INTEGER, pid_start VARCHAR(64), reused_run_id INTEGER, 
	CONSTRAINT pk_run PRIMARY KEY (id), 
	CONSTRAINT fk_run_candidate_id_candidate FOREIGN KEY(candidate_id) REFERENCES candidate (id)
)
-- next statement
CREATE INDEX ix_candidate_experiment_id ON candidate (experiment_id)
-- next statement
CREATE TABLE "artifact" (
	id INTEGER NOT NULL, 
	run_id INTEGER, 
	sha256 VARCHAR(64) NOT NULL, 
	size BIGINT NOT NULL, 
	media_type VARCHAR NOT NULL, 
	role VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	experiment_id INTEGER, 
	name TEXT, 
	CONSTRAINT pk_artifact PRIMARY KEY (id), 
	CONSTRAINT fk_artifact_run_id_run FOREIGN KEY(run_id) REFERENCES run (id), 
	CONSTRAINT fk_artifact_experiment_id_experiment FOREIGN KEY(experiment_id) REFERENCES experiment (id)
)
-- next statement
CREATE INDEX ix_artifact_run_id ON artifact (run_id)
-- next statement
CREATE INDEX ix_artifact_sha256 ON artifact (sha256)
-- next statement
CREATE INDEX ix_artifact_experiment_id ON artifact (experiment_id)
-- next statement
CREATE TABLE "decision" (
	id INTEGER NOT NULL, 
	experiment_id INTEGER NOT NULL, 
	verdict TEXT NOT NULL, 
	rationale TEXT NOT NULL, 
	author VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	evidence JSON NOT NULL, 
	candidate_id INTEGER, kind VARCHAR(16) DEFAULT 'decision' NOT NULL, evidence_kinds JSON, override TEXT, checks JSON, 
	CONSTRAINT pk_decision PRIMARY KEY (id), 
	CONSTRAINT fk_decision_experiment_id_experiment FOREIGN KEY(experiment_id) REFERENCES experiment (id), 
	CONSTRAINT fk_decision_candidate_id_candidate FOREIGN KEY(candidate_id) REFERENCES candidate (id)
)
-- next statement
CREATE INDEX ix_decision_experiment_id ON decision (experiment_id)
-- next statement
CREATE INDEX ix_decision_candidate_id ON decision (candidate_id)
-- next statement
CREATE TABLE calibration (
	id INTEGER NOT NULL, 
	chip VARCHAR NOT NULL, 
	chip_hash VARCHAR(64) NOT NULL, 
	source VARCHAR(32) NOT NULL, 
	model_version VARCHAR NOT NULL, 
	emulator_version VARCHAR, 
	constants JSON NOT NULL, 
	error_before JSON NOT NULL, 
	error_after JSON NOT NULL, 
	points JSON NOT NULL, 
	command TEXT, 
	git_commit VARCHAR(40), 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_calibration PRIMARY KEY (id)
)
-- next statement
CREATE INDEX ix_calibration_chip ON calibration (chip)
-- next statement
CREATE TABLE sweep_lock (
	experiment_id INTEGER NOT NULL, 
	host VARCHAR, 
	pid INTEGER, 
	pid_start VARCHAR(64), 
	command TEXT, 
	started_at DATETIME NOT NULL, 
	heartbeat_at DATETIME NOT NULL, 
	CONSTRAINT pk_sweep_lock PRIMARY KEY (experiment_id), 
	CONSTRAINT fk_sweep_lock_experiment_id_experiment FOREIGN KEY(experiment_id) REFERENCES experiment (id)
)
-- next statement
CREATE TABLE note (
	id INTEGER NOT NULL, 
	experiment_id INTEGER NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	text TEXT NOT NULL, 
	author VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_note PRIMARY KEY (id), 
	CONSTRAINT fk_note_experiment_id_experiment FOREIGN KEY(experiment_id) REFERENCES experiment (id)
)
-- next statement
CREATE INDEX ix_note_experiment_id ON note (experiment_id)
-- next statement
CREATE TABLE experiment_link (
	id INTEGER NOT NULL, 
	experiment_id INTEGER NOT NULL, 
	other_id INTEGER NOT NULL, 
	relation VARCHAR(16) NOT NULL, 
	reason TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_experiment_link PRIMARY KEY (id), 
	CONSTRAINT fk_experiment_link_experiment_id_experiment FOREIGN KEY(experiment_id) REFERENCES experiment (id), 
	CONSTRAINT fk_experiment_link_other_id_experiment FOREIGN KEY(other_id) REFERENCES experiment (id)
)
-- next statement
CREATE INDEX ix_experiment_link_experiment_id ON experiment_link (experiment_id)
-- next statement
CREATE INDEX ix_experiment_link_other_id ON experiment_link (other_id)
-- next statement
CREATE INDEX ix_run_candidate_id_stage ON run (candidate_id, stage)
-- next statement
CREATE TABLE candidate_run (
	candidate_id INTEGER NOT NULL, 
	role VARCHAR(16) NOT NULL, 
	experiment_id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	stage VARCHAR(16) NOT NULL, 
	status VARCHAR(16) NOT NULL, 
	reason TEXT, 
	CONSTRAINT pk_candidate_run PRIMARY KEY (candidate_id, role), 
	CONSTRAINT fk_candidate_run_candidate_id_candidate FOREIGN KEY(candidate_id) REFERENCES candidate (id), 
	CONSTRAINT fk_candidate_run_run_id_run FOREIGN KEY(run_id) REFERENCES run (id)
)
 WITHOUT ROWID


-- next statement
CREATE INDEX ix_candidate_run_experiment_id_role_status ON candidate_run (experiment_id, role, status)
-- next statement
CREATE TABLE latest_figures (
	candidate_id INTEGER NOT NULL, 
	kind VARCHAR(32) NOT NULL, 
	run_id INTEGER NOT NULL, 
	figures BLOB NOT NULL, layout_id INTEGER, 
	CONSTRAINT pk_latest_figures PRIMARY KEY (candidate_id, kind), 
	CONSTRAINT fk_latest_figures_candidate_id_candidate FOREIGN KEY(candidate_id) REFERENCES candidate (id), 
	CONSTRAINT fk_latest_figures_run_id_run FOREIGN KEY(run_id) REFERENCES run (id)
)
 WITHOUT ROWID


-- next statement
CREATE INDEX ix_run_status_stage_candidate_id ON run (status, stage, candidate_id)
-- next statement
CREATE TABLE metric_layout (
	id INTEGER NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	layout TEXT NOT NULL, 
	CONSTRAINT pk_metric_layout PRIMARY KEY (id), 
	CONSTRAINT uq_metric_layout_hash UNIQUE (hash)
)
-- next statement
CREATE TABLE run_metrics (
	run_id INTEGER NOT NULL, 
	layout_id INTEGER NOT NULL, 
	figures BLOB NOT NULL, 
	CONSTRAINT pk_run_metrics PRIMARY KEY (run_id), 
	CONSTRAINT fk_run_metrics_layout_id_metric_layout FOREIGN KEY(layout_id) REFERENCES metric_layout (id), 
	CONSTRAINT fk_run_metrics_run_id_run FOREIGN KEY(run_id) REFERENCES run (id)
)
-- next statement
CREATE TABLE candidate_text (
	id INTEGER NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	text TEXT NOT NULL, 
	CONSTRAINT pk_candidate_text PRIMARY KEY (id), 
	CONSTRAINT uq_candidate_text_hash UNIQUE (hash)
)
-- next statement
CREATE TABLE figures_layout (
	id INTEGER NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	layout TEXT NOT NULL, 
	CONSTRAINT pk_figures_layout PRIMARY KEY (id), 
	CONSTRAINT uq_figures_layout_hash UNIQUE (hash)
)
