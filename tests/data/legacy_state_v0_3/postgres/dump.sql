--
-- PostgreSQL database dump
--

\restrict IRfB7ccgCaEuFArizY7zFtkB4wcIdj24jxPKOe4fMWaFYzGWtQiytVmxKdycmTz

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: alembic_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.alembic_version (
    version_num character varying(32) NOT NULL
);


--
-- Name: attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.attempts (
    id integer NOT NULL,
    submission_id character varying(32) NOT NULL,
    number integer NOT NULL,
    worker_id integer NOT NULL,
    claimed_at timestamp without time zone NOT NULL,
    heartbeat_at timestamp without time zone NOT NULL,
    lease_expires_at timestamp without time zone NOT NULL,
    ended_at timestamp without time zone,
    outcome character varying(32)
);


--
-- Name: attempts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.attempts_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: attempts_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.attempts_id_seq OWNED BY public.attempts.id;


--
-- Name: final_choices; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.final_choices (
    submission_id character varying(32) NOT NULL,
    participant_id integer NOT NULL,
    chosen_at timestamp without time zone NOT NULL
);


--
-- Name: log_entries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.log_entries (
    idx bigint NOT NULL,
    entry bytea NOT NULL,
    kind character varying(16) NOT NULL,
    submission_id character varying(32),
    envelope_sha256 character varying(64),
    created_at timestamp without time zone NOT NULL
);


--
-- Name: participants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.participants (
    id integer NOT NULL,
    name character varying(100) NOT NULL,
    team character varying(100),
    token_sha256 character varying(64) NOT NULL,
    is_baseline boolean NOT NULL,
    created_at timestamp without time zone NOT NULL,
    revoked_at timestamp without time zone
);


--
-- Name: participants_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.participants_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: participants_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.participants_id_seq OWNED BY public.participants.id;


--
-- Name: pins; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.pins (
    id integer NOT NULL,
    competition character varying(64) NOT NULL,
    grader_version character varying(64) NOT NULL,
    digests json NOT NULL,
    active boolean NOT NULL,
    pinned_at timestamp without time zone NOT NULL
);


--
-- Name: pins_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.pins_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: pins_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.pins_id_seq OWNED BY public.pins.id;


--
-- Name: replicas; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.replicas (
    id integer NOT NULL,
    submission_id character varying(32) NOT NULL,
    attempt integer NOT NULL,
    pin_id integer NOT NULL,
    worker_id integer NOT NULL,
    fingerprint character varying(64) NOT NULL,
    outcome character varying(64) NOT NULL,
    detail json NOT NULL,
    verdict character varying(16),
    created_at timestamp without time zone NOT NULL,
    blamed_worker_id integer
);


--
-- Name: replicas_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.replicas_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: replicas_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.replicas_id_seq OWNED BY public.replicas.id;


--
-- Name: result_parts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.result_parts (
    result_id integer NOT NULL,
    full_score double precision NOT NULL,
    public_score double precision NOT NULL,
    private_score double precision NOT NULL,
    tasks json NOT NULL,
    computed_at timestamp without time zone NOT NULL
);


--
-- Name: results; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.results (
    id integer NOT NULL,
    submission_id character varying(32) NOT NULL,
    attempt integer NOT NULL,
    pin_id integer NOT NULL,
    worker_id integer NOT NULL,
    state character varying(16) NOT NULL,
    failure_code character varying(32),
    aggregate json,
    envelope_path character varying(500),
    report_path character varying(500),
    logs_path character varying(500),
    created_at timestamp without time zone NOT NULL,
    worker_signature character varying(200),
    CONSTRAINT ck_result_state CHECK (((state)::text = ANY ((ARRAY['received'::character varying, 'queued'::character varying, 'running'::character varying, 'replicating'::character varying, 'scored'::character varying, 'failed'::character varying, 'error'::character varying, 'cancelled'::character varying])::text[])))
);


--
-- Name: results_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.results_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: results_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.results_id_seq OWNED BY public.results.id;


--
-- Name: settings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.settings (
    key character varying(64) NOT NULL,
    value text NOT NULL
);


--
-- Name: shard_jobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.shard_jobs (
    id integer NOT NULL,
    submission_id character varying(32) NOT NULL,
    attempt integer NOT NULL,
    task character varying(200) NOT NULL,
    number integer NOT NULL,
    state character varying(16) NOT NULL,
    tries integer NOT NULL,
    worker_id integer,
    lease_expires_at timestamp without time zone,
    fingerprint character varying(64),
    sha256 character varying(64),
    failure_code character varying(32),
    message text NOT NULL,
    deadline_at timestamp without time zone,
    used boolean NOT NULL,
    unused integer NOT NULL,
    retry_at timestamp without time zone,
    infra_since timestamp without time zone
);


--
-- Name: shard_jobs_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.shard_jobs_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: shard_jobs_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.shard_jobs_id_seq OWNED BY public.shard_jobs.id;


--
-- Name: submissions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.submissions (
    id character varying(32) NOT NULL,
    participant_id integer NOT NULL,
    name character varying(200) NOT NULL,
    kind character varying(16) NOT NULL,
    track character varying(16) NOT NULL,
    split character varying(64) NOT NULL,
    state character varying(16) NOT NULL,
    failure_code character varying(32),
    upload_path character varying(500) NOT NULL,
    upload_sha256 character varying(64) NOT NULL,
    upload_bytes integer NOT NULL,
    content_digest character varying(64) NOT NULL,
    uploaded_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    dispatched_at timestamp without time zone,
    attempt integer NOT NULL,
    attempt_limit integer NOT NULL,
    lease_worker_id integer,
    lease_expires_at timestamp without time zone,
    version integer NOT NULL,
    pin_id integer NOT NULL,
    public_score double precision,
    result_id integer,
    labels json,
    idempotency_key character varying(64),
    retry_at timestamp without time zone,
    infra_since timestamp without time zone,
    CONSTRAINT ck_submission_state CHECK (((state)::text = ANY ((ARRAY['received'::character varying, 'queued'::character varying, 'running'::character varying, 'replicating'::character varying, 'scored'::character varying, 'failed'::character varying, 'error'::character varying, 'cancelled'::character varying])::text[]))),
    CONSTRAINT ck_submission_track CHECK (((track)::text = ANY ((ARRAY['hidden'::character varying, 'sample'::character varying])::text[])))
);


--
-- Name: transitions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.transitions (
    id integer NOT NULL,
    submission_id character varying(32) NOT NULL,
    from_state character varying(16),
    to_state character varying(16) NOT NULL,
    attempt integer NOT NULL,
    actor character varying(100) NOT NULL,
    reason text NOT NULL,
    at timestamp without time zone NOT NULL,
    CONSTRAINT ck_transition_from_state CHECK (((from_state)::text = ANY ((ARRAY['received'::character varying, 'queued'::character varying, 'running'::character varying, 'replicating'::character varying, 'scored'::character varying, 'failed'::character varying, 'error'::character varying, 'cancelled'::character varying])::text[]))),
    CONSTRAINT ck_transition_to_state CHECK (((to_state)::text = ANY ((ARRAY['received'::character varying, 'queued'::character varying, 'running'::character varying, 'replicating'::character varying, 'scored'::character varying, 'failed'::character varying, 'error'::character varying, 'cancelled'::character varying])::text[])))
);


--
-- Name: transitions_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.transitions_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: transitions_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.transitions_id_seq OWNED BY public.transitions.id;


--
-- Name: upload_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.upload_reservations (
    id integer NOT NULL,
    participant_id integer NOT NULL,
    idempotency_key character varying(64) NOT NULL,
    track character varying(16) NOT NULL,
    body_sha256 character varying(64) NOT NULL,
    declared_bytes bigint NOT NULL,
    holder character varying(32) NOT NULL,
    created_at timestamp without time zone NOT NULL,
    expires_at timestamp without time zone NOT NULL,
    arrived_at timestamp without time zone NOT NULL,
    CONSTRAINT ck_upload_reservation_track CHECK (((track)::text = ANY ((ARRAY['hidden'::character varying, 'sample'::character varying])::text[])))
);


--
-- Name: upload_reservations_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.upload_reservations_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: upload_reservations_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.upload_reservations_id_seq OWNED BY public.upload_reservations.id;


--
-- Name: web_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.web_sessions (
    id_sha256 character varying(64) NOT NULL,
    participant_id integer NOT NULL,
    started_at timestamp without time zone NOT NULL,
    expires_at timestamp without time zone NOT NULL,
    ended_at timestamp without time zone
);


--
-- Name: workers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.workers (
    id integer NOT NULL,
    name character varying(100) NOT NULL,
    token_sha256 character varying(64) NOT NULL,
    public_key text,
    local boolean NOT NULL,
    created_at timestamp without time zone NOT NULL,
    revoked_at timestamp without time zone,
    fingerprint character varying(64),
    fingerprint_stated json,
    fingerprint_signature text,
    fingerprint_refusals integer NOT NULL,
    fingerprint_refused character varying(64)
);


--
-- Name: workers_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.workers_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: workers_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.workers_id_seq OWNED BY public.workers.id;


--
-- Name: attempts id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attempts ALTER COLUMN id SET DEFAULT nextval('public.attempts_id_seq'::regclass);


--
-- Name: participants id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.participants ALTER COLUMN id SET DEFAULT nextval('public.participants_id_seq'::regclass);


--
-- Name: pins id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.pins ALTER COLUMN id SET DEFAULT nextval('public.pins_id_seq'::regclass);


--
-- Name: replicas id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.replicas ALTER COLUMN id SET DEFAULT nextval('public.replicas_id_seq'::regclass);


--
-- Name: results id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.results ALTER COLUMN id SET DEFAULT nextval('public.results_id_seq'::regclass);


--
-- Name: shard_jobs id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.shard_jobs ALTER COLUMN id SET DEFAULT nextval('public.shard_jobs_id_seq'::regclass);


--
-- Name: transitions id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.transitions ALTER COLUMN id SET DEFAULT nextval('public.transitions_id_seq'::regclass);


--
-- Name: upload_reservations id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.upload_reservations ALTER COLUMN id SET DEFAULT nextval('public.upload_reservations_id_seq'::regclass);


--
-- Name: workers id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workers ALTER COLUMN id SET DEFAULT nextval('public.workers_id_seq'::regclass);


--
-- Data for Name: alembic_version; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.alembic_version (version_num) FROM stdin;
0015_infra_backoff
\.


--
-- Data for Name: attempts; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.attempts (id, submission_id, number, worker_id, claimed_at, heartbeat_at, lease_expires_at, ended_at, outcome) FROM stdin;
1	sc1df46bef998a828	1	1	2026-12-03 16:34:38.744846	2026-12-03 16:35:19.182611	2026-12-03 16:36:19.182611	2026-12-03 16:35:28.748649	result
2	s20636ff432192e70	1	1	2026-12-03 16:35:59.712818	2026-12-03 16:36:19.800356	2026-12-03 16:37:19.800356	2026-12-03 16:36:28.507241	result
3	scb1f37a939147caa	1	1	2026-12-03 16:36:57.670856	2026-12-03 16:37:17.734972	2026-12-03 16:38:17.734972	2026-12-03 16:37:26.609269	result
4	se915e01629c8793c	1	1	2026-12-03 16:37:45.383348	2026-12-03 16:37:55.493924	2026-12-03 16:38:55.493924	2026-12-03 16:37:59.192567	result
\.


--
-- Data for Name: final_choices; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.final_choices (submission_id, participant_id, chosen_at) FROM stdin;
\.


--
-- Data for Name: log_entries; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.log_entries (idx, entry, kind, submission_id, envelope_sha256, created_at) FROM stdin;
0	\\x7b22626c696e64696e675f636f6d6d69746d656e74223a2264326163313364356231396432613134386431303336646466633930336365313630343030336136386436643166656165316530666339333565323639616437222c22636f6d7065746974696f6e5f736861323536223a2263306533633465663534356139323134333662623535363934333366376263663264386533373539336133666365363664363834633030363437616465313961222c22646174615f64696765737473223a7b227465787432636f64652f646576223a2230303062336233353030653865343439623634643263383630326436383666616138326634636139303838626161366136633934663765633534373737363736222c227465787432636f64652f74657374223a2263656239643864616236636433353531383264623734363838333134333362373134613137356530666231343534613365316432376631623831326434323031227d2c22686f73745f6b65795f6964223a2234636632656162383430356339346637626136303039316639303239396262313437393766363331356634663938346266653033346139303334643365636561222c226964656e7469666965725f636f6d6d69746d656e74223a2238336139643065613262656433623837643963383963646262653336653136633031393733366538333766623664323565363635393036336633376139393761222c226b696e64223a22636f6d7065746974696f6e222c226c6f675f6b65795f6964223a2230383030646666323234386663323131303738303435633064643835396233356237366531393163613236306235643032323535373232303131636634653562222c226f726967696e223a226772616465722d6c6f672f6c65676163792d76302d33222c22706172746974696f6e5f636f6d6d69746d656e74223a2237313933666566633034363639386662376463633933323761656230386138306235396135323766333439356362653838356461333231306236653033323033222c2274696d65223a22323032362d31322d30335431363a33333a35315a222c2276223a317d	competition	\N	\N	2026-12-03 16:33:51.921658
1	\\x7b226b696e64223a2272656365697074222c227061727469636970616e74223a2237656532626137343261353836366162303034653933393964343136653831396262663165386630343364323465643965396538656637383766353363366563222c2273616c74223a223263653938623139383137396134633730313631313039336339333564303931222c227375626d697373696f6e223a2265613761333361316239626461643638356337313364646136393265613235363834303537383337333961643438323032623962393231326134623033666532222c2274696d65223a22323032362d31322d30335431363a33343a32355a222c2275706c6f6164223a2239316230613033326164366437666463346430313939356536653737343032633665376232366335643836626231623933356338323665303233663462396362222c2276223a317d	receipt	sc1df46bef998a828	\N	2026-12-03 16:34:38.67113
2	\\x7b22617474656d7074223a312c22656e76656c6f70655f736861323536223a2236396665323631633832643061306261323764623664313164363966623439303337393237633536363436343737356336316339306636313939636330346665222c226b696e64223a227265706f7274222c227061727469636970616e74223a2232313732353963636139333439653139393861303432393633626162393135666437376234663332653461303933666664663533343739346637363037643936222c227061796c6f61645f736861323536223a2233353637386539313232336236636432363131356435383635393939353163323738323735636132613530316665366136343066373631663031363030643431222c2273616c74223a223838383438386136333333373464646439656262363536323464336466386338222c22737461747573223a2273636f726564222c227375626d697373696f6e223a2230313939396538323930663035353263336463633566646434636666613432346362396530353461613963643763326532666662326431373964383037386435222c2274696d65223a22323032362d31322d30335431363a33353a32385a222c2276223a317d	report	sc1df46bef998a828	69fe261c82d0a0ba27db6d11d69fb49037927c566464775c61c90f6199cc04fe	2026-12-03 16:35:28.778021
3	\\x7b22617474656d7074223a312c22656e76656c6f70655f736861323536223a2262613730376364333061346661373135313430313634363938613530363866623836626431366163396436613266313763356263653831336533393030313130222c226b696e64223a227265706f7274222c227061727469636970616e74223a2264643139353939643335613736613237653837383833656533373632386663373964376565373130323230303761306334616434656165646562316562366236222c227061796c6f61645f736861323536223a2239303937653466393336626332643132333538373466386530643066666135646161313134656630623364623333353662633130326637353334666531636663222c2273616c74223a223632653630336634663865306236666661373530653264326635663762343339222c22737461747573223a2273636f726564222c227375626d697373696f6e223a2236643134646635363434623430616330356335636230363938343439313263626635393361613736636664373263343434646231393238633438656363343735222c2274696d65223a22323032362d31322d30335431363a33353a32385a222c2276223a317d	report	sc1df46bef998a828	ba707cd30a4fa715140164698a5068fb86bd16ac9d6a2f17c5bce813e3900110	2026-12-03 16:35:28.786528
4	\\x7b226b696e64223a2272656365697074222c227061727469636970616e74223a2230316636636265323439626438326362316662333563343666663332323333363730643938396536343063323934343032363933643864396465623836656536222c2273616c74223a226163346331636565393235636265653938306530643965653066393132646530222c227375626d697373696f6e223a2262313661666332306435663561333135343337333537303164633330373037626364333932316439323433643865356466323433633864333333316532303363222c2274696d65223a22323032362d31322d30335431363a33353a35315a222c2275706c6f6164223a2238643837336461656339303562626566343362383863323636333564346235666331333333303664356561656136353766616636346435333238376662333663222c2276223a317d	receipt	s20636ff432192e70	\N	2026-12-03 16:35:59.634687
5	\\x7b22617474656d7074223a312c22656e76656c6f70655f736861323536223a2232383134373662356132373235363765663833356431623065336366336665326333613330393161353963366362646534636365646562353138396362383361222c226b696e64223a227265706f7274222c227061727469636970616e74223a2264623164303935343934396130336665313465613639643031633364313363656566646335396362616536313764383264383834393937333430393666626431222c227061796c6f61645f736861323536223a2231343036313165643265363039386636346635623430343839316631373161386635633430643836376131633135666639636561373562343762323965313238222c2273616c74223a223432613664343562356338373161386538333465346566666462636565643830222c22737461747573223a2273636f726564222c227375626d697373696f6e223a2262656537623633663264316139326464303132313964303432663938653134333463326239396265383738313464303266613437626330616136323333316161222c2274696d65223a22323032362d31322d30335431363a33363a32385a222c2276223a317d	report	s20636ff432192e70	281476b5a272567ef835d1b0e3cf3fe2c3a3091a59c6cbde4ccedeb5189cb83a	2026-12-03 16:36:28.534914
6	\\x7b22617474656d7074223a312c22656e76656c6f70655f736861323536223a2233373737663435333531326666346138663264383537666639646563353564316336343231663864343931373862643734353361356536366264363530653430222c226b696e64223a227265706f7274222c227061727469636970616e74223a2236393038336262336166303561346630626331663361666338306161336438633031613939363539643836346664663739303631376634623261323861326138222c227061796c6f61645f736861323536223a2239353331633235363031373165343535643232646464393437316262366564663537656131326166353462646236636439356564613262626134393463343562222c2273616c74223a223730356166306464646134336539373561366461353631613930316435623037222c22737461747573223a2273636f726564222c227375626d697373696f6e223a2234396665386464373533636134653136306461316235373635653735653739663134393231393636633533653565366235396330336333363133636538646561222c2274696d65223a22323032362d31322d30335431363a33363a32385a222c2276223a317d	report	s20636ff432192e70	3777f453512ff4a8f2d857ff9dec55d1c6421f8d49178bd7453a5e66bd650e40	2026-12-03 16:36:28.53773
7	\\x7b226b696e64223a2272656365697074222c227061727469636970616e74223a2236613463396566613661316562353136336162346336316433656436323765393462386563376431623430333732316530666635306634633135623738613832222c2273616c74223a223432623830666561363632333336633163396262303039616431656437386231222c227375626d697373696f6e223a2264343034323238623932633464396534313065636437633238343061663461386530393033303133643533623338643836316533343766373166313030336631222c2274696d65223a22323032362d31322d30335431363a33363a35305a222c2275706c6f6164223a2236356363653934356465383365623966633666306237323535363736623537656362613030613530386134376438636631383533383765613061383533646265222c2276223a317d	receipt	scb1f37a939147caa	\N	2026-12-03 16:36:57.633993
8	\\x7b22617474656d7074223a312c22656e76656c6f70655f736861323536223a2234636265333139363230656161663366636632336430363361343763363831343765306464326563316365636564393635663262666232356262343363343134222c226b696e64223a227265706f7274222c227061727469636970616e74223a2233643363323433333032663931636631326166646462306163313664376566623161646663653530663831663938356561353634623331303336613139323362222c227061796c6f61645f736861323536223a2235316131666264653331373765646363396531613064373639303433643830323930393333353165653833643739346539303730363734303161333038383734222c2273616c74223a223038376534346262663831313865363962353336643533643062303033303032222c22737461747573223a2273636f726564222c227375626d697373696f6e223a2235343061653531356666393433313433623137633433346532396138373231306432333862326430313434613065393538323437353432666633653631643365222c2274696d65223a22323032362d31322d30335431363a33373a32365a222c2276223a317d	report	scb1f37a939147caa	4cbe319620eaaf3fcf23d063a47c68147e0dd2ec1ceced965f2bfb25bb43c414	2026-12-03 16:37:26.626049
9	\\x7b22617474656d7074223a312c22656e76656c6f70655f736861323536223a2266393965356334386138306132383734303361386261643862343066366364643939326363643935353866646662623538613265626436336530376639626631222c226b696e64223a227265706f7274222c227061727469636970616e74223a2232613434393466613163633639653233626632306335613164343336373534313633393763663934643635656163663935623338366432626131353363666564222c227061796c6f61645f736861323536223a2231653964653465636634333136356234303065376263326533323462386536383334623934306464316537653364396336346137633538306631336433306437222c2273616c74223a223761323134383261333839363462343837613133356633343162623733613835222c22737461747573223a2273636f726564222c227375626d697373696f6e223a2262373531636332663761643237643634613461373466396464396264626130323363653935386631623966396566333235626162616331316330633236376565222c2274696d65223a22323032362d31322d30335431363a33373a32365a222c2276223a317d	report	scb1f37a939147caa	f99e5c48a80a287403a8bad8b40f6cdd992ccd9558fdfbb58a2ebd63e07f9bf1	2026-12-03 16:37:26.631906
10	\\x7b226b696e64223a2272656365697074222c227061727469636970616e74223a2262393637653463366366343261356461323861313533636334306662313338613239343235636661333934643535613937373731666433633863323739336162222c2273616c74223a226664626132343231363631623136313032333862636163353338383434656161222c227375626d697373696f6e223a2230373534623266653036396166363632346533353661636434336662343732643632613239633633396337353561363464643765343035353037356164613836222c2274696d65223a22323032362d31322d30335431363a33373a33395a222c2275706c6f6164223a2266313733366533323439303464393031316631656634653166633937366365306663323961626261393539396330613131633064313133636532333030623339222c2276223a317d	receipt	se915e01629c8793c	\N	2026-12-03 16:37:45.323172
11	\\x7b22617474656d7074223a312c22656e76656c6f70655f736861323536223a2237363034333637643136376531663332636337626566353636353864656439626638363565616565343861643166373131366636656338303761306662646466222c226b696e64223a227265706f7274222c227061727469636970616e74223a2232633234663162626436316531613962343866386631393736353135656135303361326635613938393637663338633861626637366562303333623462306165222c227061796c6f61645f736861323536223a2230363334623332373738646161326232393364663266656635336239316530373566343638656635353663363735343536623535643337393233613332313135222c2273616c74223a223735613337666663376634393235343932646664323636306237626362306639222c22737461747573223a226661696c6564222c227375626d697373696f6e223a2266333963386235376532336330666463613366376334636662356565643864643033646238346339346630333531653633653962373538366339346137306236222c2274696d65223a22323032362d31322d30335431363a33373a35395a222c2276223a317d	report	se915e01629c8793c	7604367d167e1f32cc7bef56658ded9bf865eaee48ad1f7116f6ec807a0fbddf	2026-12-03 16:37:59.224173
\.


--
-- Data for Name: participants; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.participants (id, name, team, token_sha256, is_baseline, created_at, revoked_at) FROM stdin;
1	alice	alpha-lab	aee0da82af5cec6e04b1740cfc9f749aac08f691af69f0f53b01f58bafe97700	f	2026-12-03 16:33:56.701391	\N
2	bob	\N	4812f3d532591a98224fa4af326cc5cce714264abb71d70d72608ccfa1ab9e64	f	2026-12-03 16:34:02.112223	\N
\.


--
-- Data for Name: pins; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.pins (id, competition, grader_version, digests, active, pinned_at) FROM stdin;
1	legacy-v0-3	0.3.0	{"benchmark": "mini", "version": "2", "split": "test", "sample_split": "dev", "tasks": {"text2code": {"test": "ceb9d8dab6cd355182db7468831433b714a175e0fb1454a3e1d27f1b812d4201", "dev": "000b3b3500e8e449b64d2c8602d686faa82f4ca9088baa6a6c94f7ec54777676"}}}	t	2026-12-03 16:33:51.852132
\.


--
-- Data for Name: replicas; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.replicas (id, submission_id, attempt, pin_id, worker_id, fingerprint, outcome, detail, verdict, created_at, blamed_worker_id) FROM stdin;
\.


--
-- Data for Name: result_parts; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.result_parts (result_id, full_score, public_score, private_score, tasks, computed_at) FROM stdin;
1	0.39918446476446023	0.40039168232183237	0.3986679243509331	{"full": {"text2code": 0.39918446476446023}, "public": {"text2code": 0.40039168232183237}, "private": {"text2code": 0.3986679243509331}}	2026-12-03 16:35:28.706878
2	0.39918446476446023	0.40039168232183237	0.3986679243509331	{"full": {"text2code": 0.39918446476446023}, "public": {"text2code": 0.40039168232183237}, "private": {"text2code": 0.3986679243509331}}	2026-12-03 16:36:28.484879
3	0.39918446476446023	0.40039168232183237	0.3986679243509331	{"full": {"text2code": 0.39918446476446023}, "public": {"text2code": 0.40039168232183237}, "private": {"text2code": 0.3986679243509331}}	2026-12-03 16:37:26.552722
\.


--
-- Data for Name: results; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.results (id, submission_id, attempt, pin_id, worker_id, state, failure_code, aggregate, envelope_path, report_path, logs_path, created_at, worker_signature) FROM stdin;
1	sc1df46bef998a828	1	1	1	scored	\N	{"measure": "NDCG@10", "score": 0.39918446476446023, "complete": false, "groups": {}}	/tmp/legacy-state.QJfduO/postgres/state/results/sc1df46bef998a828/1/report.dsse.json	/tmp/legacy-state.QJfduO/postgres/state/results/sc1df46bef998a828/1/report.json	/tmp/legacy-state.QJfduO/postgres/state/results/sc1df46bef998a828/1/logs	2026-12-03 16:35:28.731774	\N
2	s20636ff432192e70	1	1	1	scored	\N	{"measure": "NDCG@10", "score": 0.39918446476446023, "complete": false, "groups": {}}	/tmp/legacy-state.QJfduO/postgres/state/results/s20636ff432192e70/1/report.dsse.json	/tmp/legacy-state.QJfduO/postgres/state/results/s20636ff432192e70/1/report.json	/tmp/legacy-state.QJfduO/postgres/state/results/s20636ff432192e70/1/logs	2026-12-03 16:36:28.505014	\N
3	scb1f37a939147caa	1	1	1	scored	\N	{"measure": "NDCG@10", "score": 0.39918446476446023, "complete": false, "groups": {}}	/tmp/legacy-state.QJfduO/postgres/state/results/scb1f37a939147caa/1/report.dsse.json	/tmp/legacy-state.QJfduO/postgres/state/results/scb1f37a939147caa/1/report.json	/tmp/legacy-state.QJfduO/postgres/state/results/scb1f37a939147caa/1/logs	2026-12-03 16:37:26.607294	\N
4	se915e01629c8793c	1	1	1	failed	OUTPUT_MISSING	{"measure": "NDCG@10", "score": null, "complete": false, "groups": {}}	/tmp/legacy-state.QJfduO/postgres/state/results/se915e01629c8793c/1/report.dsse.json	/tmp/legacy-state.QJfduO/postgres/state/results/se915e01629c8793c/1/report.json	/tmp/legacy-state.QJfduO/postgres/state/results/se915e01629c8793c/1/logs	2026-12-03 16:37:59.186601	\N
\.


--
-- Data for Name: settings; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.settings (key, value) FROM stdin;
partition_commitment	7193fefc046698fb7dcc9327aeb08a80b59a527f3495cbe885da3210b6e03203
blinding_key_id	8fbf565092aaf48e7342a2380263176520c8d98ad023f0a944b6eca43a7e7ee0
log_head	
\.


--
-- Data for Name: shard_jobs; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.shard_jobs (id, submission_id, attempt, task, number, state, tries, worker_id, lease_expires_at, fingerprint, sha256, failure_code, message, deadline_at, used, unused, retry_at, infra_since) FROM stdin;
\.


--
-- Data for Name: submissions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.submissions (id, participant_id, name, kind, track, split, state, failure_code, upload_path, upload_sha256, upload_bytes, content_digest, uploaded_at, updated_at, dispatched_at, attempt, attempt_limit, lease_worker_id, lease_expires_at, version, pin_id, public_score, result_id, labels, idempotency_key, retry_at, infra_since) FROM stdin;
scb1f37a939147caa	2	bm25-take-3	docker	hidden	test	scored	\N	scb1f37a939147caa.tar.gz	2e43815e910ae48c515beac78e4e60ca9984c794ce873931c80b34c96c5a0f0b	134099892	a9f499a75151d28a34e60d75a4899e94dab0ba5aafcbeb5463af8fa9c0be886b	2026-12-03 16:36:50.142026	2026-12-03 16:37:26.611034	2026-12-03 16:36:57.65164	1	3	\N	\N	3	1	0.39918446476446023	3	{"training": {"setting": "zero-shot", "datasets": []}, "model": {}}	71f1c4f74ff0b94639bd101f5c4d501b	\N	\N
sc1df46bef998a828	1	bm25-take-1	docker	hidden	test	scored	\N	sc1df46bef998a828.tar.gz	7d68b9bf56489e9d4590ac0d4d5a2fb1ed17286d286319fda9e55484482a4cd4	134100002	e18a8c36c0751359c34e7f4be77aa992560c8415d6c6ba90b5638d8b4ea9964f	2026-12-03 16:34:25.562365	2026-12-03 16:35:28.771105	2026-12-03 16:34:38.697975	1	3	\N	\N	3	1	0.39918446476446023	1	{"training": {"setting": "zero-shot", "datasets": []}, "model": {}}	f192de1e97cb9d788a2fa8a95269aae3	\N	\N
s20636ff432192e70	1	bm25-take-2	docker	hidden	test	scored	\N	s20636ff432192e70.tar.gz	3e4ee2913f71c37e41b7b710ce6e3da7b27a85dd360cf7c8a5f5903ad72d4e49	134099928	e2d941a783e7b86a8cd8a7b81916eab7a7664f146c8d614db843dd26fba20df1	2026-12-03 16:35:51.709367	2026-12-03 16:36:28.514054	2026-12-03 16:35:59.654206	1	3	\N	\N	3	1	0.39918446476446023	2	{"training": {"setting": "zero-shot", "datasets": []}, "model": {}}	d2230f0a1b89e535f028c7baf796d6dc	\N	\N
se915e01629c8793c	1	broken	docker	hidden	test	failed	OUTPUT_MISSING	se915e01629c8793c.tar.gz	e653cdb2f8a446f65d99894c6e6ab661275ac4e36f535a7e9a98b361b8f0528f	59677422	6b14ce4f96e737e5683672abf6319287eec80cebadfb88bcb7cb1eb1f92f2426	2026-12-03 16:37:39.458955	2026-12-03 16:37:59.206272	2026-12-03 16:37:45.366599	1	3	\N	\N	3	1	\N	4	{"training": {"setting": "zero-shot", "datasets": []}, "model": {}}	85a664cab779f9221a0b588d28e0d36a	\N	\N
\.


--
-- Data for Name: transitions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.transitions (id, submission_id, from_state, to_state, attempt, actor, reason, at) FROM stdin;
1	sc1df46bef998a828	\N	received	0	upload	134100002 bytes, sha256 7d68b9bf56489e9d4590ac0d4d5a2fb1ed17286d286319fda9e55484482a4cd4	2026-12-03 16:34:25.562365
2	sc1df46bef998a828	received	queued	0	upload	upload checked and stored	2026-12-03 16:34:38.697999
3	sc1df46bef998a828	queued	running	1	worker:1	attempt 1 claimed	2026-12-03 16:34:38.744879
4	sc1df46bef998a828	running	scored	1	worker:1	attempt 1: all tasks scored	2026-12-03 16:35:28.771105
5	s20636ff432192e70	\N	received	0	upload	134099928 bytes, sha256 3e4ee2913f71c37e41b7b710ce6e3da7b27a85dd360cf7c8a5f5903ad72d4e49	2026-12-03 16:35:51.709367
6	s20636ff432192e70	received	queued	0	upload	upload checked and stored	2026-12-03 16:35:59.654227
7	s20636ff432192e70	queued	running	1	worker:1	attempt 1 claimed	2026-12-03 16:35:59.712854
8	s20636ff432192e70	running	scored	1	worker:1	attempt 1: all tasks scored	2026-12-03 16:36:28.514054
9	scb1f37a939147caa	\N	received	0	upload	134099892 bytes, sha256 2e43815e910ae48c515beac78e4e60ca9984c794ce873931c80b34c96c5a0f0b	2026-12-03 16:36:50.142026
10	scb1f37a939147caa	received	queued	0	upload	upload checked and stored	2026-12-03 16:36:57.651661
11	scb1f37a939147caa	queued	running	1	worker:1	attempt 1 claimed	2026-12-03 16:36:57.670883
12	scb1f37a939147caa	running	scored	1	worker:1	attempt 1: all tasks scored	2026-12-03 16:37:26.611034
13	se915e01629c8793c	\N	received	0	upload	59677422 bytes, sha256 e653cdb2f8a446f65d99894c6e6ab661275ac4e36f535a7e9a98b361b8f0528f	2026-12-03 16:37:39.458955
14	se915e01629c8793c	received	queued	0	upload	upload checked and stored	2026-12-03 16:37:45.36662
15	se915e01629c8793c	queued	running	1	worker:1	attempt 1 claimed	2026-12-03 16:37:45.383376
16	se915e01629c8793c	running	failed	1	worker:1	attempt 1: a task failed	2026-12-03 16:37:59.206272
\.


--
-- Data for Name: upload_reservations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.upload_reservations (id, participant_id, idempotency_key, track, body_sha256, declared_bytes, holder, created_at, expires_at, arrived_at) FROM stdin;
\.


--
-- Data for Name: web_sessions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.web_sessions (id_sha256, participant_id, started_at, expires_at, ended_at) FROM stdin;
\.


--
-- Data for Name: workers; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.workers (id, name, token_sha256, public_key, local, created_at, revoked_at, fingerprint, fingerprint_stated, fingerprint_signature, fingerprint_refusals, fingerprint_refused) FROM stdin;
1	local-1	44c2d4b6e6a0ae212b8878460650e17ae84c97dd8b554a160d8f4808f7f03ee7	\N	t	2026-12-03 16:33:52.024233	\N	571c3161d23a48201bbfcc22880b308d41f3dca389c175e9086ccccff1bde8df	{"machine": "x86_64", "isa": ["sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "amx_tile"], "cpu_flags_sha256": "fc7df03f53a7dec482597fb69e874eba3c2ac44fcc43e42f93c6e8c0bde93842", "onnxruntime": "1.32.0", "execution_provider": "CPUExecutionProvider"}	\N	0	\N
\.


--
-- Name: attempts_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.attempts_id_seq', 4, true);


--
-- Name: participants_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.participants_id_seq', 2, true);


--
-- Name: pins_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.pins_id_seq', 1, true);


--
-- Name: replicas_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.replicas_id_seq', 1, false);


--
-- Name: results_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.results_id_seq', 4, true);


--
-- Name: shard_jobs_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.shard_jobs_id_seq', 1, false);


--
-- Name: transitions_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.transitions_id_seq', 16, true);


--
-- Name: upload_reservations_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.upload_reservations_id_seq', 4, true);


--
-- Name: workers_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.workers_id_seq', 1, true);


--
-- Name: alembic_version alembic_version_pkc; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);


--
-- Name: attempts attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (id);


--
-- Name: final_choices final_choices_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.final_choices
    ADD CONSTRAINT final_choices_pkey PRIMARY KEY (submission_id);


--
-- Name: log_entries log_entries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.log_entries
    ADD CONSTRAINT log_entries_pkey PRIMARY KEY (idx);


--
-- Name: participants participants_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.participants
    ADD CONSTRAINT participants_name_key UNIQUE (name);


--
-- Name: participants participants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.participants
    ADD CONSTRAINT participants_pkey PRIMARY KEY (id);


--
-- Name: participants participants_token_sha256_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.participants
    ADD CONSTRAINT participants_token_sha256_key UNIQUE (token_sha256);


--
-- Name: pins pins_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.pins
    ADD CONSTRAINT pins_pkey PRIMARY KEY (id);


--
-- Name: replicas replicas_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.replicas
    ADD CONSTRAINT replicas_pkey PRIMARY KEY (id);


--
-- Name: result_parts result_parts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.result_parts
    ADD CONSTRAINT result_parts_pkey PRIMARY KEY (result_id);


--
-- Name: results results_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.results
    ADD CONSTRAINT results_pkey PRIMARY KEY (id);


--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (key);


--
-- Name: shard_jobs shard_jobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.shard_jobs
    ADD CONSTRAINT shard_jobs_pkey PRIMARY KEY (id);


--
-- Name: submissions submissions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.submissions
    ADD CONSTRAINT submissions_pkey PRIMARY KEY (id);


--
-- Name: transitions transitions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.transitions
    ADD CONSTRAINT transitions_pkey PRIMARY KEY (id);


--
-- Name: upload_reservations upload_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.upload_reservations
    ADD CONSTRAINT upload_reservations_pkey PRIMARY KEY (id);


--
-- Name: shard_jobs uq_shard_jobs_job; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.shard_jobs
    ADD CONSTRAINT uq_shard_jobs_job UNIQUE (submission_id, attempt, task, number);


--
-- Name: submissions uq_submissions_participant_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.submissions
    ADD CONSTRAINT uq_submissions_participant_key UNIQUE (participant_id, idempotency_key);


--
-- Name: upload_reservations uq_upload_reservations_participant_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.upload_reservations
    ADD CONSTRAINT uq_upload_reservations_participant_key UNIQUE (participant_id, idempotency_key);


--
-- Name: web_sessions web_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.web_sessions
    ADD CONSTRAINT web_sessions_pkey PRIMARY KEY (id_sha256);


--
-- Name: workers workers_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_name_key UNIQUE (name);


--
-- Name: workers workers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (id);


--
-- Name: workers workers_token_sha256_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_token_sha256_key UNIQUE (token_sha256);


--
-- Name: ix_attempts_submission_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_attempts_submission_id ON public.attempts USING btree (submission_id);


--
-- Name: ix_final_choices_participant_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_final_choices_participant_id ON public.final_choices USING btree (participant_id);


--
-- Name: ix_log_entries_envelope_sha256; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_log_entries_envelope_sha256 ON public.log_entries USING btree (envelope_sha256);


--
-- Name: ix_log_entries_submission_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_log_entries_submission_id ON public.log_entries USING btree (submission_id);


--
-- Name: ix_replicas_blamed_worker_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_replicas_blamed_worker_id ON public.replicas USING btree (blamed_worker_id);


--
-- Name: ix_replicas_submission_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_replicas_submission_id ON public.replicas USING btree (submission_id);


--
-- Name: ix_replicas_worker_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_replicas_worker_id ON public.replicas USING btree (worker_id);


--
-- Name: ix_results_submission_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_results_submission_id ON public.results USING btree (submission_id);


--
-- Name: ix_shard_jobs_state; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_shard_jobs_state ON public.shard_jobs USING btree (state);


--
-- Name: ix_shard_jobs_submission_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_shard_jobs_submission_id ON public.shard_jobs USING btree (submission_id);


--
-- Name: ix_submissions_participant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_submissions_participant ON public.submissions USING btree (participant_id, uploaded_at);


--
-- Name: ix_submissions_state; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_submissions_state ON public.submissions USING btree (state);


--
-- Name: ix_transitions_submission_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_transitions_submission_id ON public.transitions USING btree (submission_id);


--
-- Name: ix_upload_reservations_expires_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_upload_reservations_expires_at ON public.upload_reservations USING btree (expires_at);


--
-- Name: ix_web_sessions_participant_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_web_sessions_participant_id ON public.web_sessions USING btree (participant_id);


--
-- Name: attempts attempts_submission_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attempts
    ADD CONSTRAINT attempts_submission_id_fkey FOREIGN KEY (submission_id) REFERENCES public.submissions(id);


--
-- Name: attempts attempts_worker_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attempts
    ADD CONSTRAINT attempts_worker_id_fkey FOREIGN KEY (worker_id) REFERENCES public.workers(id);


--
-- Name: final_choices final_choices_participant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.final_choices
    ADD CONSTRAINT final_choices_participant_id_fkey FOREIGN KEY (participant_id) REFERENCES public.participants(id);


--
-- Name: final_choices final_choices_submission_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.final_choices
    ADD CONSTRAINT final_choices_submission_id_fkey FOREIGN KEY (submission_id) REFERENCES public.submissions(id);


--
-- Name: replicas fk_replicas_blamed_worker_id_workers; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.replicas
    ADD CONSTRAINT fk_replicas_blamed_worker_id_workers FOREIGN KEY (blamed_worker_id) REFERENCES public.workers(id);


--
-- Name: replicas replicas_pin_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.replicas
    ADD CONSTRAINT replicas_pin_id_fkey FOREIGN KEY (pin_id) REFERENCES public.pins(id);


--
-- Name: replicas replicas_submission_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.replicas
    ADD CONSTRAINT replicas_submission_id_fkey FOREIGN KEY (submission_id) REFERENCES public.submissions(id);


--
-- Name: replicas replicas_worker_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.replicas
    ADD CONSTRAINT replicas_worker_id_fkey FOREIGN KEY (worker_id) REFERENCES public.workers(id);


--
-- Name: result_parts result_parts_result_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.result_parts
    ADD CONSTRAINT result_parts_result_id_fkey FOREIGN KEY (result_id) REFERENCES public.results(id);


--
-- Name: results results_pin_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.results
    ADD CONSTRAINT results_pin_id_fkey FOREIGN KEY (pin_id) REFERENCES public.pins(id);


--
-- Name: results results_submission_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.results
    ADD CONSTRAINT results_submission_id_fkey FOREIGN KEY (submission_id) REFERENCES public.submissions(id);


--
-- Name: results results_worker_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.results
    ADD CONSTRAINT results_worker_id_fkey FOREIGN KEY (worker_id) REFERENCES public.workers(id);


--
-- Name: shard_jobs shard_jobs_submission_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.shard_jobs
    ADD CONSTRAINT shard_jobs_submission_id_fkey FOREIGN KEY (submission_id) REFERENCES public.submissions(id);


--
-- Name: shard_jobs shard_jobs_worker_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.shard_jobs
    ADD CONSTRAINT shard_jobs_worker_id_fkey FOREIGN KEY (worker_id) REFERENCES public.workers(id);


--
-- Name: submissions submissions_lease_worker_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.submissions
    ADD CONSTRAINT submissions_lease_worker_id_fkey FOREIGN KEY (lease_worker_id) REFERENCES public.workers(id);


--
-- Name: submissions submissions_participant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.submissions
    ADD CONSTRAINT submissions_participant_id_fkey FOREIGN KEY (participant_id) REFERENCES public.participants(id);


--
-- Name: submissions submissions_pin_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.submissions
    ADD CONSTRAINT submissions_pin_id_fkey FOREIGN KEY (pin_id) REFERENCES public.pins(id);


--
-- Name: transitions transitions_submission_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.transitions
    ADD CONSTRAINT transitions_submission_id_fkey FOREIGN KEY (submission_id) REFERENCES public.submissions(id);


--
-- Name: upload_reservations upload_reservations_participant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.upload_reservations
    ADD CONSTRAINT upload_reservations_participant_id_fkey FOREIGN KEY (participant_id) REFERENCES public.participants(id);


--
-- Name: web_sessions web_sessions_participant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.web_sessions
    ADD CONSTRAINT web_sessions_participant_id_fkey FOREIGN KEY (participant_id) REFERENCES public.participants(id);


--
-- PostgreSQL database dump complete
--

\unrestrict IRfB7ccgCaEuFArizY7zFtkB4wcIdj24jxPKOe4fMWaFYzGWtQiytVmxKdycmTz

