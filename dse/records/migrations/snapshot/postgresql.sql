-- dse record store schema at revision 0019: made by `python -m dse.records.snapshot`, not by hand
CREATE TABLE alembic_version (
    version_num character varying(32) NOT NULL
);
-- next statement
CREATE TABLE artifact (
    id integer NOT NULL,
    run_id integer,
    sha256 character varying(64) NOT NULL,
    size bigint NOT NULL,
    media_type character varying NOT NULL,
    role character varying NOT NULL,
    created_at timestamp with time zone NOT NULL,
    experiment_id integer,
    name text
);
-- next statement
CREATE SEQUENCE artifact_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE artifact_id_seq OWNED BY artifact.id;
-- next statement
CREATE TABLE calibration (
    id integer NOT NULL,
    chip character varying NOT NULL,
    chip_hash character varying(64) NOT NULL,
    source character varying(32) NOT NULL,
    model_version character varying NOT NULL,
    emulator_version character varying,
    constants json NOT NULL,
    error_before json NOT NULL,
    error_after json NOT NULL,
    points json NOT NULL,
    command text,
    git_commit character varying(40),
    created_at timestamp with time zone NOT NULL
);
-- next statement
CREATE SEQUENCE calibration_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE calibration_id_seq OWNED BY calibration.id;
-- next statement
CREATE TABLE candidate (
    id integer NOT NULL,
    experiment_id integer NOT NULL,
    hash character varying(64) NOT NULL,
    origin character varying(16) NOT NULL,
    diff json NOT NULL,
    created_at timestamp with time zone NOT NULL,
    why text,
    notes text,
    config_id integer,
    mapping_id integer
);
-- next statement
CREATE SEQUENCE candidate_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE candidate_id_seq OWNED BY candidate.id;
-- next statement
CREATE TABLE candidate_run (
    candidate_id integer NOT NULL,
    role character varying(16) NOT NULL,
    experiment_id integer NOT NULL,
    run_id integer NOT NULL,
    stage character varying(16) NOT NULL,
    status character varying(16) NOT NULL,
    reason text
);
-- next statement
CREATE TABLE candidate_text (
    id integer NOT NULL,
    hash character varying(64) NOT NULL,
    text text NOT NULL
);
-- next statement
CREATE SEQUENCE candidate_text_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE candidate_text_id_seq OWNED BY candidate_text.id;
-- next statement
CREATE TABLE decision (
    id integer NOT NULL,
    experiment_id integer NOT NULL,
    verdict text NOT NULL,
    rationale text NOT NULL,
    author character varying NOT NULL,
    created_at timestamp with time zone NOT NULL,
    evidence json NOT NULL,
    candidate_id integer,
    kind character varying(16) DEFAULT 'decision'::character varying NOT NULL,
    evidence_kinds json,
    override text,
    checks json
);
-- next statement
CREATE SEQUENCE decision_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE decision_id_seq OWNED BY decision.id;
-- next statement
CREATE TABLE experiment (
    id integer NOT NULL,
    name character varying NOT NULL,
    hypothesis text NOT NULL,
    status character varying(16) NOT NULL,
    acceptance json NOT NULL,
    workload_recipe character varying NOT NULL,
    workload_hash character varying(64) NOT NULL,
    baseline_candidate_id integer,
    spec_text text NOT NULL,
    spec_hash character varying(64) NOT NULL,
    limitations text NOT NULL,
    open_questions text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    workload json,
    judged_run_id integer
);
-- next statement
CREATE SEQUENCE experiment_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE experiment_id_seq OWNED BY experiment.id;
-- next statement
CREATE TABLE experiment_link (
    id integer NOT NULL,
    experiment_id integer NOT NULL,
    other_id integer NOT NULL,
    relation character varying(16) NOT NULL,
    reason text NOT NULL,
    created_at timestamp with time zone NOT NULL
);
-- next statement
CREATE SEQUENCE experiment_link_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE experiment_link_id_seq OWNED BY experiment_link.id;
-- next statement
CREATE TABLE figures_layout (
    id integer NOT NULL,
    hash character varying(64) NOT NULL,
    layout text NOT NULL
);
-- next statement
CREATE SEQUENCE figures_layout_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE figures_layout_id_seq OWNED BY figures_layout.id;
-- next statement
CREATE TABLE latest_figures (
    candidate_id integer NOT NULL,
    kind character varying(32) NOT NULL,
    run_id integer NOT NULL,
    figures bytea NOT NULL,
    layout_id integer
);
-- next statement
CREATE TABLE metric_layout (
    id integer NOT NULL,
    hash character varying(64) NOT NULL,
    layout text NOT NULL
);
-- next statement
CREATE SEQUENCE metric_layout_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE metric_layout_id_seq OWNED BY metric_layout.id;
-- next statement
CREATE TABLE note (
    id integer NOT NULL,
    experiment_id integer NOT NULL,
    kind character varying(16) NOT NULL,
    text text NOT NULL,
    author character varying NOT NULL,
    created_at timestamp with time zone NOT NULL
);
-- next statement
CREATE SEQUENCE note_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE note_id_seq OWNED BY note.id;
-- next statement
CREATE TABLE run (
    id integer NOT NULL,
    candidate_id integer NOT NULL,
    stage character varying(16) NOT NULL,
    status character varying(16) NOT NULL,
    reason text,
    error text,
    traceback text,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    heartbeat_at timestamp with time zone,
    host character varying,
    git_commit character varying(40),
    git_dirty boolean,
    versions json NOT NULL,
    command text NOT NULL,
    seed integer,
    model_version character varying NOT NULL,
    emulator_version character varying,
    pid integer,
    pid_start character varying(64),
    reused_run_id integer
);
-- next statement
CREATE SEQUENCE run_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
-- next statement
ALTER SEQUENCE run_id_seq OWNED BY run.id;
-- next statement
CREATE TABLE run_metrics (
    run_id integer NOT NULL,
    layout_id integer NOT NULL,
    figures bytea NOT NULL
);
-- next statement
CREATE TABLE sweep_lock (
    experiment_id integer NOT NULL,
    host character varying,
    pid integer,
    pid_start character varying(64),
    command text,
    started_at timestamp with time zone NOT NULL,
    heartbeat_at timestamp with time zone NOT NULL
);
-- next statement
ALTER TABLE ONLY artifact ALTER COLUMN id SET DEFAULT nextval('artifact_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY calibration ALTER COLUMN id SET DEFAULT nextval('calibration_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY candidate ALTER COLUMN id SET DEFAULT nextval('candidate_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY candidate_text ALTER COLUMN id SET DEFAULT nextval('candidate_text_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY decision ALTER COLUMN id SET DEFAULT nextval('decision_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY experiment ALTER COLUMN id SET DEFAULT nextval('experiment_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY experiment_link ALTER COLUMN id SET DEFAULT nextval('experiment_link_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY figures_layout ALTER COLUMN id SET DEFAULT nextval('figures_layout_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY metric_layout ALTER COLUMN id SET DEFAULT nextval('metric_layout_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY note ALTER COLUMN id SET DEFAULT nextval('note_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY run ALTER COLUMN id SET DEFAULT nextval('run_id_seq'::regclass);
-- next statement
ALTER TABLE ONLY alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);
-- next statement
ALTER TABLE ONLY artifact
    ADD CONSTRAINT pk_artifact PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY calibration
    ADD CONSTRAINT pk_calibration PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY candidate
    ADD CONSTRAINT pk_candidate PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY candidate_run
    ADD CONSTRAINT pk_candidate_run PRIMARY KEY (candidate_id, role);
-- next statement
ALTER TABLE ONLY candidate_text
    ADD CONSTRAINT pk_candidate_text PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY decision
    ADD CONSTRAINT pk_decision PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY experiment
    ADD CONSTRAINT pk_experiment PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY experiment_link
    ADD CONSTRAINT pk_experiment_link PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY figures_layout
    ADD CONSTRAINT pk_figures_layout PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY latest_figures
    ADD CONSTRAINT pk_latest_figures PRIMARY KEY (candidate_id, kind);
-- next statement
ALTER TABLE ONLY metric_layout
    ADD CONSTRAINT pk_metric_layout PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY note
    ADD CONSTRAINT pk_note PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY run
    ADD CONSTRAINT pk_run PRIMARY KEY (id);
-- next statement
ALTER TABLE ONLY run_metrics
    ADD CONSTRAINT pk_run_metrics PRIMARY KEY (run_id);
-- next statement
ALTER TABLE ONLY sweep_lock
    ADD CONSTRAINT pk_sweep_lock PRIMARY KEY (experiment_id);
-- next statement
ALTER TABLE ONLY candidate
    ADD CONSTRAINT uq_candidate_experiment_id_hash UNIQUE (experiment_id, hash);
-- next statement
ALTER TABLE ONLY candidate_text
    ADD CONSTRAINT uq_candidate_text_hash UNIQUE (hash);
-- next statement
ALTER TABLE ONLY experiment
    ADD CONSTRAINT uq_experiment_name UNIQUE (name);
-- next statement
ALTER TABLE ONLY figures_layout
    ADD CONSTRAINT uq_figures_layout_hash UNIQUE (hash);
-- next statement
ALTER TABLE ONLY metric_layout
    ADD CONSTRAINT uq_metric_layout_hash UNIQUE (hash);
-- next statement
CREATE INDEX ix_artifact_experiment_id ON artifact USING btree (experiment_id);
-- next statement
CREATE INDEX ix_artifact_run_id ON artifact USING btree (run_id);
-- next statement
CREATE INDEX ix_artifact_sha256 ON artifact USING btree (sha256);
-- next statement
CREATE INDEX ix_calibration_chip ON calibration USING btree (chip);
-- next statement
CREATE INDEX ix_candidate_experiment_id ON candidate USING btree (experiment_id);
-- next statement
CREATE INDEX ix_candidate_run_experiment_id_role_status ON candidate_run USING btree (experiment_id, role, status);
-- next statement
CREATE INDEX ix_decision_candidate_id ON decision USING btree (candidate_id);
-- next statement
CREATE INDEX ix_decision_experiment_id ON decision USING btree (experiment_id);
-- next statement
CREATE INDEX ix_experiment_link_experiment_id ON experiment_link USING btree (experiment_id);
-- next statement
CREATE INDEX ix_experiment_link_other_id ON experiment_link USING btree (other_id);
-- next statement
CREATE INDEX ix_note_experiment_id ON note USING btree (experiment_id);
-- next statement
CREATE INDEX ix_run_candidate_id_stage ON run USING btree (candidate_id, stage);
-- next statement
CREATE INDEX ix_run_status_stage_candidate_id ON run USING btree (status, stage, candidate_id);
-- next statement
ALTER TABLE ONLY artifact
    ADD CONSTRAINT fk_artifact_experiment_id_experiment FOREIGN KEY (experiment_id) REFERENCES experiment(id);
-- next statement
ALTER TABLE ONLY artifact
    ADD CONSTRAINT fk_artifact_run_id_run FOREIGN KEY (run_id) REFERENCES run(id);
-- next statement
ALTER TABLE ONLY candidate
    ADD CONSTRAINT fk_candidate_experiment_id_experiment FOREIGN KEY (experiment_id) REFERENCES experiment(id);
-- next statement
ALTER TABLE ONLY candidate_run
    ADD CONSTRAINT fk_candidate_run_candidate_id_candidate FOREIGN KEY (candidate_id) REFERENCES candidate(id);
-- next statement
ALTER TABLE ONLY candidate_run
    ADD CONSTRAINT fk_candidate_run_run_id_run FOREIGN KEY (run_id) REFERENCES run(id);
-- next statement
ALTER TABLE ONLY decision
    ADD CONSTRAINT fk_decision_candidate_id_candidate FOREIGN KEY (candidate_id) REFERENCES candidate(id);
-- next statement
ALTER TABLE ONLY decision
    ADD CONSTRAINT fk_decision_experiment_id_experiment FOREIGN KEY (experiment_id) REFERENCES experiment(id);
-- next statement
ALTER TABLE ONLY experiment
    ADD CONSTRAINT fk_experiment_baseline_candidate_id_candidate FOREIGN KEY (baseline_candidate_id) REFERENCES candidate(id);
-- next statement
ALTER TABLE ONLY experiment_link
    ADD CONSTRAINT fk_experiment_link_experiment_id_experiment FOREIGN KEY (experiment_id) REFERENCES experiment(id);
-- next statement
ALTER TABLE ONLY experiment_link
    ADD CONSTRAINT fk_experiment_link_other_id_experiment FOREIGN KEY (other_id) REFERENCES experiment(id);
-- next statement
ALTER TABLE ONLY latest_figures
    ADD CONSTRAINT fk_latest_figures_candidate_id_candidate FOREIGN KEY (candidate_id) REFERENCES candidate(id);
-- next statement
ALTER TABLE ONLY latest_figures
    ADD CONSTRAINT fk_latest_figures_run_id_run FOREIGN KEY (run_id) REFERENCES run(id);
-- next statement
ALTER TABLE ONLY note
    ADD CONSTRAINT fk_note_experiment_id_experiment FOREIGN KEY (experiment_id) REFERENCES experiment(id);
-- next statement
ALTER TABLE ONLY run
    ADD CONSTRAINT fk_run_candidate_id_candidate FOREIGN KEY (candidate_id) REFERENCES candidate(id);
-- next statement
ALTER TABLE ONLY run_metrics
    ADD CONSTRAINT fk_run_metrics_layout_id_metric_layout FOREIGN KEY (layout_id) REFERENCES metric_layout(id);
-- next statement
ALTER TABLE ONLY run_metrics
    ADD CONSTRAINT fk_run_metrics_run_id_run FOREIGN KEY (run_id) REFERENCES run(id);
-- next statement
ALTER TABLE ONLY sweep_lock
    ADD CONSTRAINT fk_sweep_lock_experiment_id_experiment FOREIGN KEY (experiment_id) REFERENCES experiment(id);
