"""A public word list of chest radiograph reports, written by hand for the tokenizer.

It is general radiology vocabulary (the words of the 14 CheXpert observations, anatomy, devices,
descriptors, comparison wording), the same for every site and never read off any report: a
vocabulary fitted on a hospital's reports would release its rare words. Words outside this list
are spelled out character by character by ``WordCharTokenizer``, so none of them is lost.
"""

from __future__ import annotations

_TEXT = """
a about above absence absent abnormal abnormality abnormalities acute additional adenopathy after
again air airspace airspaces alignment all along also although an and angle angles anterior aorta
aortic apex apical appear appearance appears approximately are area areas artifact as at
atelectasis atelectatic atherosclerotic available axillary azygos
base bases basilar be been bibasilar bilateral bilaterally blunting blunted body bone bones bony
borderline both bowel bronchial bronchiectasis bronchovascular but by
calcification calcifications calcified can cardiac cardiomediastinal cardiomegaly cardiopulmonary
carina catheter cavitation central change changes chest chronic clavicle clear clearly clip clips
collapse compared comparison component concerning configuration congestion consistent
consolidation consolidations consolidative contour contours cm costophrenic could crowding
decreased deformity degenerative demonstrate demonstrated demonstrates dense density
diaphragm diaphragms diffuse dilated disease displaced distal distension does dorsal drain
due
edema effusion effusions elevated elevation emphysema emphysematous endotracheal enlarged
enlargement entirely evaluation evidence exam examination excluded exclude expected
fibrosis fibrotic film films findings fissure flattening fluid focal for fracture fractures
frontal from fullness
gas given granuloma granulomas granulomatous
has have healed heart hemidiaphragm hemidiaphragms hiatal hila hilar hilum hernia however
hyperexpanded hyperexpansion hyperinflated hyperinflation
identified in increase increased infection infiltrate infiltrates inflammatory interstitial interval
into is it its
jugular
kyphosis
large larger lateral left less lesion lesions likely limits line lines lingula lobe lobes
low lower lucency lung lungs lymph lymphadenopathy
markings mass masses may mediastinal mediastinum mid mild mildly minimal minor mm moderate
more most multifocal multilevel multiple
negative new no node nodes nodular nodule nodules noncalcified normal not noted
obscured obscuring of on opacification opacities opacity or osseous otherwise overlying
pa pacemaker pacer parenchymal patchy perihilar persistent picc placement pleura pleural
pneumonia pneumothoraces pneumothorax portable position possible possibly posterior
postoperative previous previously prior probable probably process prominence prominent
pulmonary
questionable
radiograph radiographs recommend region remain remains remote resolution resolved rib ribs
right rotated rotation
scarring scoliosis seen sequela sequelae severe shadow side silhouette since size
slightly small soft spine spondylosis stable status sternotomy study subcutaneous subsegmental
suggest suggestive superimposed support surgical suspicious
than that the there these this thoracic thorax throughout tip to trachea tube tubes
unchanged underlying unremarkable upper
vascular vascularity vasculature versus vertebral views visualized volume volumes
well were which with within without
zone zones
one two three four five six seven eight nine ten
"""

RADIOLOGY_WORDS: tuple[str, ...] = tuple(sorted(set(_TEXT.split())))
